package runner

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/synchro/synchro"
	"github.com/synchro/synchro/gen"
)

// ErrPackNewer: the pack installed in the database is newer than this runner's
// release. A runner runs only against the pack of its own release (docs/install.md):
// the functions it calls may have changed or be gone, so it waits, retrying, until
// the release that migrated the database replaces it.
var ErrPackNewer = errors.New("synchro: the pack is newer than this runner")

type packNewerError struct{ installed, own int64 }

func (e *packNewerError) Error() string {
	return fmt.Sprintf("synchro: the pack installed is at migration %d, newer than this runner's release (%d): "+
		"start the release that migrated the database; this one waits (docs/install.md)", e.installed, e.own)
}

func (e *packNewerError) Is(target error) bool { return target == ErrPackNewer }

// checkPack returns a *packNewerError (ErrPackNewer) when the pack installed
// (synchro.runner_pack_version) is newer than the newest migration this release
// ships. A pack without the function is older than it: OpenStage and the session's
// feature checks judge such a pack.
func checkPack(ctx context.Context, db gen.DBTX) error {
	v, err := gen.New(db).RunnerPackVersion(ctx)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "42883" {
		return nil
	}
	if err != nil {
		return fmt.Errorf("synchro: runner_pack_version: %w", err)
	}
	if own := synchro.PackVersion(); v > own {
		return &packNewerError{installed: v, own: own}
	}
	return nil
}

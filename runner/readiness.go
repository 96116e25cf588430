package runner

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/synchro/synchro/gen"
)

// Readiness asks the database whether Synchro is ready (synchro.ready(), the
// failing checks of synchro.readiness()) over a small pool of its own, apart
// from the runner's sessions: /readyz answers also while the runner is down.
type Readiness struct {
	pool *pgxpool.Pool
}

// NewReadiness prepares a pool of at most two sessions; it connects lazily.
func NewReadiness(dbURL string) (*Readiness, error) {
	cfg, err := pgxpool.ParseConfig(dbURL)
	if err != nil {
		return nil, errParseURL
	}
	cfg.MaxConns = 2
	cfg.ConnConfig.RuntimeParams["application_name"] = "synchro-readyz"
	// As the runner's sessions (sessionParams): unqualified names resolve in
	// pg_catalog, whatever search_path the database or role sets.
	cfg.ConnConfig.RuntimeParams["search_path"] = "pg_catalog, pg_temp"
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		return nil, fmt.Errorf("synchro: readiness: %w", err)
	}
	return &Readiness{pool: pool}, nil
}

// Close closes the pool.
func (r *Readiness) Close() { r.pool.Close() }

// Ready reports synchro.ready() and the names of the failing checks, in the
// contract's order.
func (r *Readiness) Ready(ctx context.Context) (bool, []string, error) {
	row, err := gen.New(r.pool).Ready(ctx)
	if err != nil {
		return false, nil, fmt.Errorf("synchro: readiness: %w", err)
	}
	return row.Ready, row.Failing, nil
}

package main

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/synchro/synchro/internal/testrunner"
	"github.com/synchro/synchro/tests/testdb"
)

func TestMain(m *testing.M) { testdb.Main(m) }

// The example end to end on the real pack and runner: articles written, updated and
// deleted are found (and no longer found) in the full-text index the consumer group
// feeds; a second indexer process for the same group waits for the lease and changes
// nothing.
func TestSearchIndexFollowsWrites(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	ctx := context.Background()
	_, err := db.Pool.Exec(ctx, `
		CREATE TABLE public.articles (id int8 PRIMARY KEY, title text NOT NULL, body text NOT NULL, views int NOT NULL DEFAULT 0);
		SELECT synchro.register_table('public.articles', 'articles');
		SELECT synchro.activate_registry();`)
	require.NoError(t, err)
	testrunner.Start(t, db)

	cfg, err := pgxpool.ParseConfig(db.URL)
	require.NoError(t, err)
	cfg.AfterConnect = func(ctx context.Context, c *pgx.Conn) error {
		_, err := c.Exec(ctx, `SET ROLE synchro_consumer`)
		return err
	}
	src, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	defer src.Close()

	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 2)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	for range 2 { // two indexers for one group: one holds the lease, the other waits
		go func() { done <- Serve(runCtx, src, db.Pool, "search", log) }()
	}

	_, err = db.Pool.Exec(ctx, `INSERT INTO public.articles (id, title, body) VALUES
		(1, 'PostgreSQL logical replication', 'slots, publications and walsenders'),
		(2, 'Full text search', 'tsvector and tsquery in PostgreSQL'),
		(3, 'Gardening', 'tomatoes need sun')`)
	require.NoError(t, err)
	ix := Index{DB: db.Pool}
	search := func(q string) []string {
		hits, err := ix.Search(ctx, q)
		if err != nil {
			return []string{"error: " + err.Error()}
		}
		var out []string
		for _, h := range hits {
			out = append(out, h.Table+"/"+h.PK)
		}
		return out
	}
	require.Eventually(t, func() bool { return len(search("postgresql")) == 2 }, 60*time.Second, 20*time.Millisecond)
	require.ElementsMatch(t, []string{"articles/1", "articles/2"}, search("postgresql"))
	require.Equal(t, []string{"articles/3"}, search("tomatoes"))

	// An update moves a document; a delete removes it; an update of a column without
	// text changes nothing findable.
	_, err = db.Pool.Exec(ctx, `UPDATE public.articles SET body = 'tomatoes and PostgreSQL' WHERE id = 3`)
	require.NoError(t, err)
	_, err = db.Pool.Exec(ctx, `DELETE FROM public.articles WHERE id = 1`)
	require.NoError(t, err)
	_, err = db.Pool.Exec(ctx, `UPDATE public.articles SET views = views + 1 WHERE id = 2`)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		// Every write materialized first, then the lag: a lag of 0 read before the
		// last write was materialized says nothing about it.
		if countTxns(t, db) != 4 {
			return false
		}
		var lag int64
		_ = db.Pool.QueryRow(ctx, `SELECT lag_transactions FROM synchro.consumer_groups WHERE name = 'search'`).Scan(&lag)
		return lag == 0
	}, 60*time.Second, 20*time.Millisecond)
	require.ElementsMatch(t, []string{"articles/2", "articles/3"}, search("postgresql"))
	require.Empty(t, search("walsenders"))

	// The index holds each row's last version.
	var stale int
	require.NoError(t, db.Pool.QueryRow(ctx, `
		SELECT count(*) FROM public.search_documents d
		  JOIN synchro.projection p ON p.pk = d.pk AND p.version <> d.version`).Scan(&stale))
	require.Zero(t, stale)

	cancel()
	for range 2 {
		require.NoError(t, <-done)
	}
}

func countTxns(t *testing.T, db *testdb.DB) int {
	t.Helper()
	var n int
	require.NoError(t, db.Pool.QueryRow(context.Background(), `SELECT count(*) FROM synchro.txn`).Scan(&n))
	return n
}

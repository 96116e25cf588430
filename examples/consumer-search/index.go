package main

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/synchro/synchro/consumer"
)

// Index is the destination: a full-text index table, search_documents, with one
// document per synced row (table and key), its text and tsvector, and the change that
// wrote it last.
type Index struct {
	DB *pgxpool.Pool
}

// Setup creates the index table if it is not there. Not a synced table: nothing
// registers it, so it stays out of the stream.
func (ix Index) Setup(ctx context.Context) error {
	// Indexers starting together take turns (CREATE ... IF NOT EXISTS alone races).
	_, err := ix.DB.Exec(ctx, `
		SELECT pg_advisory_xact_lock(hashtext('consumer-search setup'));
		CREATE TABLE IF NOT EXISTS public.search_documents (
		  table_id  text NOT NULL,
		  pk        text NOT NULL,
		  body      text NOT NULL,
		  document  tsvector GENERATED ALWAYS AS (to_tsvector('simple', body)) STORED,
		  version   text NOT NULL,
		  change_id text NOT NULL,
		  PRIMARY KEY (table_id, pk)
		);
		CREATE INDEX IF NOT EXISTS search_documents_document ON public.search_documents USING gin (document);`)
	return err
}

// Apply writes one batch in one destination transaction: an upsert puts the row's text
// in the index, a delete takes it out. Idempotent (the last state of each row wins,
// and batches come in commit order), so a redelivered batch changes nothing.
func (ix Index) Apply(ctx context.Context, b consumer.Batch) error {
	return pgx.BeginFunc(ctx, ix.DB, func(tx pgx.Tx) error {
		for _, txn := range b.Transactions {
			for _, c := range txn.Changes {
				pk := keyText(c.PK)
				if c.Op == "delete" {
					if _, err := tx.Exec(ctx, `DELETE FROM public.search_documents WHERE table_id = $1 AND pk = $2`,
						c.Table, pk); err != nil {
						return err
					}
					continue
				}
				body, err := rowText(c.Row)
				if err != nil {
					return fmt.Errorf("change %s: %w", c.ChangeID, err)
				}
				if _, err := tx.Exec(ctx, `
					INSERT INTO public.search_documents AS d (table_id, pk, body, version, change_id)
					VALUES ($1, $2, $3, $4, $5)
					ON CONFLICT (table_id, pk) DO UPDATE
					  SET body = excluded.body, version = excluded.version, change_id = excluded.change_id
					WHERE d.change_id IS DISTINCT FROM excluded.change_id`,
					c.Table, pk, body, c.Version, c.ChangeID); err != nil {
					return err
				}
			}
		}
		return nil
	})
}

// Hit is one search result.
type Hit struct {
	Table string
	PK    string
}

// Search returns the documents matching query (plainto_tsquery, 'simple'), best first.
func (ix Index) Search(ctx context.Context, query string) ([]Hit, error) {
	rows, err := ix.DB.Query(ctx, `
		SELECT table_id, pk FROM public.search_documents
		 WHERE document @@ plainto_tsquery('simple', $1)
		 ORDER BY ts_rank(document, plainto_tsquery('simple', $1)) DESC, table_id, pk`, query)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (Hit, error) {
		var h Hit
		return h, r.Scan(&h.Table, &h.PK)
	})
}

// keyText is the key as text: a JSON string's content, a JSON number's digits.
func keyText(pk json.RawMessage) string {
	var s string
	if json.Unmarshal(pk, &s) == nil {
		return s
	}
	return string(pk)
}

// rowText is the text of a row image: its string values, by column name.
func rowText(row json.RawMessage) (string, error) {
	var cols map[string]any
	if err := json.Unmarshal(row, &cols); err != nil {
		return "", err
	}
	names := make([]string, 0, len(cols))
	for n := range cols {
		names = append(names, n)
	}
	sort.Strings(names)
	var parts []string
	for _, n := range names {
		if s, ok := cols[n].(string); ok {
			parts = append(parts, s)
		}
	}
	return strings.Join(parts, " "), nil
}

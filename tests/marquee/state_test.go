package marquee

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/synchro/synchro/client"
)

var nonSlotChars = regexp.MustCompile(`[^a-z0-9_]`)

// slotName names the slot after the test database (testdb drops its slots).
func slotName(db string) string {
	s := nonSlotChars.ReplaceAllString(strings.ToLower(db), "_")
	if len(s) > 63 {
		s = s[len(s)-63:]
	}
	return s
}

// snapshot is the registered tables' rows as the model holds them (rel -> pk ->
// image) and each row's version (rel/pk -> version).
type snapshot struct {
	rows     map[string]map[string]map[string]any
	versions map[string]string
}

// liveState reads the registered tables' rows and their versions before the first
// start: the baseline the stream starts from. The versions are those the fences gave
// the seed rows (synchro.row_version, written in the seeding transaction), the ones a
// row keeps until a change of its own.
func liveState(t *testing.T, ctx context.Context, pool *pgxpool.Pool) snapshot {
	t.Helper()
	out := snapshot{rows: map[string]map[string]map[string]any{}, versions: map[string]string{}}
	for _, rel := range []string{"project_members", "tasks", "notes"} {
		out.rows[rel] = map[string]map[string]any{}
		rows, err := pool.Query(ctx, `SELECT x.id::text, to_jsonb(x)::text, rv.version FROM `+rel+` x
			JOIN synchro.relation r ON r.relid = '`+rel+`'::regclass
			LEFT JOIN synchro.row_version rv ON rv.relation_id = r.relation_id AND rv.pk = x.id::text`)
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var pk, img string
			var version *string
			if err := rows.Scan(&pk, &img, &version); err != nil {
				t.Fatal(err)
			}
			if version == nil {
				t.Fatalf("seed row %s/%s has no version", rel, pk)
			}
			m, err := decodeJSON([]byte(img))
			if err != nil {
				t.Fatal(err)
			}
			out.rows[rel][pk] = m
			out.versions[rel+"/"+pk] = *version
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// replica is a scope's rows: table/key -> version and canonical image.
type replica map[string]string

func canon(t *testing.T, raw []byte) string {
	t.Helper()
	m, err := decodeJSON(raw)
	if err != nil {
		t.Fatalf("%s: %v", raw, err)
	}
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// liveScope is a scope's state from the live tables and their current versions.
func liveScope(t *testing.T, ctx context.Context, conn *pgx.Conn, scope string, extras []string) replica {
	t.Helper()
	q := `
SELECT 'notes', n.id, rv.version, to_jsonb(n)::text
  FROM notes n JOIN synchro.row_version rv
    ON rv.relation_id = (SELECT relation_id FROM synchro.relation WHERE table_id = 'notes') AND rv.pk = n.id
 WHERE 'owner:' || n.owner = $1
UNION ALL
SELECT 'tasks', t.id::text, rv.version, to_jsonb(t)::text
  FROM tasks t JOIN synchro.row_version rv
    ON rv.relation_id = (SELECT relation_id FROM synchro.relation WHERE table_id = 'tasks') AND rv.pk = t.id::text
 WHERE 'owner:' || t.owner = $1
    OR EXISTS (SELECT 1 FROM project_members m WHERE m.project_id = t.project_id AND 'user:' || m.user_id = $1)`
	for _, x := range extras {
		q += fmt.Sprintf(`
UNION ALL
SELECT '%[1]s', x.id::text, rv.version, to_jsonb(x)::text
  FROM %[1]s x JOIN synchro.row_version rv
    ON rv.relation_id = (SELECT relation_id FROM synchro.relation WHERE table_id = '%[1]s') AND rv.pk = x.id::text
 WHERE 'owner:' || x.owner = $1`, x)
	}
	rows, err := conn.Query(ctx, q, scope)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := replica{}
	for rows.Next() {
		var table, pk, version, image string
		if err := rows.Scan(&table, &pk, &version, &image); err != nil {
			t.Fatal(err)
		}
		out[table+"/"+pk] = version + " " + canon(t, []byte(image))
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func replicaOf(t *testing.T, ctx context.Context, c *client.Client, scope string) replica {
	t.Helper()
	rows, err := c.Rows(ctx, scope)
	if err != nil {
		t.Fatal(err)
	}
	out := replica{}
	for _, r := range rows {
		out[r.Table+"/"+r.PK] = r.Version + " " + canon(t, r.Data)
	}
	return out
}

// diff describes how got differs from want ("" when equal).
func diff(want, got replica) string {
	var d []string
	for k, v := range want {
		if g, ok := got[k]; !ok {
			d = append(d, "missing "+k)
		} else if g != v {
			d = append(d, fmt.Sprintf("differs %s: want %s got %s", k, v, g))
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			d = append(d, "extra "+k)
		}
	}
	sort.Strings(d)
	if len(d) > 10 {
		d = append(d[:10], fmt.Sprintf("and %d more", len(d)-10))
	}
	return strings.Join(d, "; ")
}

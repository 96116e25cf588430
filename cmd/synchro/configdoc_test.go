package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/synchro/synchro"
	"github.com/synchro/synchro/tests/testdb"
)

// docs/configuration.md lists every flag of every command, every SYNCHRO_* variable
// and every readiness limit. These tests fail when one exists that the page does not
// mention, so a new flag ships with its row.

const configDoc = "../../docs/configuration.md"

// subcommands names the subcommands of commands whose flags follow a subcommand word
// (`synchro migrate up -h`). A command whose `-h` prints no usage must be listed here.
var subcommands = map[string][]string{
	"migrate":    {"up", "status"},
	"migrations": {"export", "prelude"},
}

// docFlag is one flag as `synchro <cmd> -h` prints it.
type docFlag struct {
	name, env, def string
}

var (
	flagLine = regexp.MustCompile(`^  -([a-z0-9-]+)`)
	envRef   = regexp.MustCompile(`\$(SYNCHRO_[A-Z0-9_]+)`)
	defRef   = regexp.MustCompile(`\(default "?([^"()$]*)"?\)`)
)

// helpFlags runs `synchro args... -h` in-process and parses the flags it prints.
func helpFlags(t *testing.T, args ...string) (usage string, flags []docFlag) {
	t.Helper()
	out := &syncBuffer{}
	e := &env{stdout: out, stderr: out, logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	code := run(context.Background(), e, append(args, "-h"))
	require.Equal(t, 0, code, "synchro %s -h: %s", strings.Join(args, " "), out.String())
	lines := strings.Split(out.String(), "\n")
	for i := 0; i < len(lines); i++ {
		m := flagLine.FindStringSubmatch(lines[i])
		if m == nil {
			continue
		}
		f := docFlag{name: m[1]}
		help := ""
		if i+1 < len(lines) && strings.HasPrefix(lines[i+1], "    \t") {
			help = lines[i+1]
			i++
		}
		if e := envRef.FindStringSubmatch(help); e != nil {
			f.env = e[1]
		}
		if d := defRef.FindAllStringSubmatch(help, -1); len(d) > 0 {
			f.def = d[len(d)-1][1]
		}
		flags = append(flags, f)
	}
	return out.String(), flags
}

// docSection is the part of the page under the heading that names `synchro <cmd>`,
// up to the next heading of the same level.
func docSection(t *testing.T, doc, cmd string) string {
	t.Helper()
	heading := "## `synchro " + cmd + "`"
	i := strings.Index(doc, "\n"+heading)
	require.GreaterOrEqual(t, i, 0, "docs/configuration.md has no section %q", heading)
	rest := doc[i+1+len(heading):]
	if j := strings.Index(rest, "\n## "); j >= 0 {
		rest = rest[:j]
	}
	return rest
}

// tableRow is the table row of section whose first cell is `--name`.
func tableRow(section, name string) string {
	for _, line := range strings.Split(section, "\n") {
		if strings.HasPrefix(line, "| `--"+name+"` |") {
			return line
		}
	}
	return ""
}

func readDoc(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(configDoc)
	require.NoError(t, err)
	return string(b)
}

// Every flag of every command has a row in that command's section of
// docs/configuration.md, with its SYNCHRO_* variable and its default.
func TestConfigurationDocListsEveryFlag(t *testing.T) {
	t.Parallel()
	doc := readDoc(t)
	names := make([]string, 0)
	for name := range commands() {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			section := docSection(t, doc, name)
			invocations := [][]string{{name}}
			if subs, ok := subcommands[name]; ok {
				invocations = nil
				for _, s := range subs {
					invocations = append(invocations, []string{name, s})
				}
			}
			for _, args := range invocations {
				usage, flags := helpFlags(t, args...)
				require.Contains(t, usage, "usage: synchro "+name,
					"synchro %s -h prints no usage: list the command's subcommands in subcommands", strings.Join(args, " "))
				for _, f := range flags {
					row := tableRow(section, f.name)
					require.NotEmpty(t, row, "docs/configuration.md, section `synchro %s`: no table row for --%s", name, f.name)
					if f.env != "" {
						require.Contains(t, row, "`"+f.env+"`", "the row of --%s names its variable", f.name)
					}
					if f.def != "" {
						require.Contains(t, row, f.def, "the row of --%s gives its default", f.name)
					}
				}
			}
		})
	}
}

var envName = regexp.MustCompile(`SYNCHRO_[A-Z0-9_]*[A-Z0-9]`)

// Every SYNCHRO_* variable the code reads is in docs/configuration.md.
func TestConfigurationDocListsEveryVariable(t *testing.T) {
	t.Parallel()
	doc := readDoc(t)
	seen := map[string]bool{}
	err := filepath.WalkDir("../..", func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") && path != "../.." || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, v := range envName.FindAllString(string(src), -1) {
			if !seen[v] {
				seen[v] = true
				require.Contains(t, doc, "`"+v+"`", "%s reads %s: docs/configuration.md must list it", path, v)
			}
		}
		return nil
	})
	require.NoError(t, err)
	require.Contains(t, seen, envDatabaseURL, "the walk found the code")
}

// Every column of synchro.readiness_limit has a row in the readiness limits table,
// with the default an install writes.
func TestConfigurationDocListsEveryReadinessLimit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	doc := readDoc(t)
	i := strings.Index(doc, "## Readiness limits")
	require.GreaterOrEqual(t, i, 0)
	section := doc[i:]
	if j := strings.Index(section[2:], "\n## "); j >= 0 {
		section = section[:j+2]
	}
	db := testdb.New(t)
	rows, err := db.Pool.Query(ctx, `
		SELECT column_name, data_type FROM information_schema.columns
		 WHERE table_schema = 'synchro' AND table_name = 'readiness_limit' AND column_name <> 'singleton'
		 ORDER BY ordinal_position`)
	require.NoError(t, err)
	type column struct{ name, typ string }
	cols, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (column, error) {
		var c column
		return c, r.Scan(&c.name, &c.typ)
	})
	require.NoError(t, err)
	require.NotEmpty(t, cols)
	for _, c := range cols {
		expr := pgx.Identifier{c.name}.Sanitize() + "::text"
		if c.typ == "interval" {
			expr = fmt.Sprintf("extract(epoch FROM %s)::bigint || ' seconds'", pgx.Identifier{c.name}.Sanitize())
		}
		var def string
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT `+expr+` FROM synchro.readiness_limit`).Scan(&def))
		var row string
		for _, line := range strings.Split(section, "\n") {
			if strings.HasPrefix(line, "| `"+c.name+"`") {
				row = line
			}
		}
		require.NotEmpty(t, row, "docs/configuration.md, Readiness limits: no row for %s", c.name)
		require.Contains(t, row, "`"+def+"`", "the row of %s gives the installed default", c.name)
	}
}

// Every row of synchro.setting an install writes has a row in the settings table of
// docs/configuration.md, with the value an install writes.
func TestConfigurationDocListsEverySetting(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	doc := readDoc(t)
	i := strings.Index(doc, "## Settings (`synchro.setting`)")
	require.GreaterOrEqual(t, i, 0)
	section := doc[i:]
	if j := strings.Index(section[2:], "\n## "); j >= 0 {
		section = section[:j+2]
	}
	db := testdb.NewEmpty(t)
	require.NoError(t, synchro.Install(ctx, db.SQL))
	rows, err := db.Pool.Query(ctx, `SELECT name, value FROM synchro.setting ORDER BY name`)
	require.NoError(t, err)
	type setting struct{ name, value string }
	settings, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (setting, error) {
		var s setting
		return s, r.Scan(&s.name, &s.value)
	})
	require.NoError(t, err)
	require.NotEmpty(t, settings)
	for _, s := range settings {
		var row string
		for _, line := range strings.Split(section, "\n") {
			if strings.HasPrefix(line, "| `"+s.name+"` |") {
				row = line
			}
		}
		require.NotEmpty(t, row, "docs/configuration.md, Settings: no row for %s", s.name)
		if s.name == "lock_seed" {
			continue // a per-install secret, not a default: never printed
		}
		require.Contains(t, row, "| `"+s.value+"`", "the row of %s gives the installed default", s.name)
	}
}

package synchro

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// CI runs the tests package on PostgreSQL 16, 17 and 18 in shards (make test-matrix-ci,
// scripts/test-shard): every top-level test of the package must fall in exactly one
// shard, whatever its parameter is called, or a newer major would silently never run it.
func TestShardsCoverTheTestsPackage(t *testing.T) {
	t.Parallel()
	fset := token.NewFileSet()
	files, err := filepath.Glob(filepath.Join("tests", "*_test.go"))
	require.NoError(t, err)
	var names []string
	for _, f := range files {
		file, err := parser.ParseFile(fset, f, nil, parser.SkipObjectResolution)
		require.NoError(t, err, f)
		for _, d := range file.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Recv != nil || !strings.HasPrefix(fn.Name.Name, "Test") || fn.Name.Name == "TestMain" {
				continue
			}
			params := fn.Type.Params.List
			if len(params) != 1 {
				continue
			}
			star, ok := params[0].Type.(*ast.StarExpr)
			if !ok {
				continue
			}
			sel, ok := star.X.(*ast.SelectorExpr)
			if ok && sel.Sel.Name == "T" {
				names = append(names, fn.Name.Name)
			}
		}
	}
	require.Greater(t, len(names), 100, "the parse found the package's tests")

	const n = 3
	var shards []*regexp.Regexp
	for k := 0; k < n; k++ {
		out, err := exec.Command("scripts/test-shard", "tests", "3", string(rune('0'+k))).Output()
		require.NoError(t, err, "shard %d", k)
		shards = append(shards, regexp.MustCompile(strings.TrimSpace(string(out))))
	}
	for _, name := range names {
		in := 0
		for _, re := range shards {
			if re.MatchString(name) {
				in++
			}
		}
		require.Equal(t, 1, in, "%s is in %d shards", name, in)
	}
	out, err := exec.Command("scripts/test-shard", "tests", "3", "3").CombinedOutput()
	require.Error(t, err, "K must be below N: %s", out)
}

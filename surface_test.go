package airlock_test

import (
	"go/doc"
	"go/parser"
	"go/token"
	"io/fs"
	"strings"
	"testing"
)

// TestSurface keeps the root package's exported surface small: at most 47
// names as `go doc -short` lists them (a type with its constructors and
// constant groups, each on a line of its own).
func TestSurface(t *testing.T) {
	fset := token.NewFileSet()
	pkgs, err := parser.ParseDir(fset, ".", func(fi fs.FileInfo) bool { return !strings.HasSuffix(fi.Name(), "_test.go") }, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	p := doc.New(pkgs["airlock"], "github.com/airlock-sandbox/airlock", 0)
	var names []string
	for _, v := range append(p.Consts, p.Vars...) {
		names = append(names, strings.Join(v.Names, ","))
	}
	for _, f := range p.Funcs {
		names = append(names, f.Name)
	}
	for _, ty := range p.Types {
		names = append(names, ty.Name)
		for _, v := range append(ty.Consts, ty.Vars...) {
			names = append(names, strings.Join(v.Names, ","))
		}
		for _, f := range ty.Funcs {
			names = append(names, f.Name)
		}
	}
	if len(p.Vars) > 0 {
		t.Errorf("exported variables are mutable globals: %v", p.Vars[0].Names)
	}
	if len(names) > 47 {
		t.Errorf("the root package exports %d names, more than 47: %v", len(names), names)
	}
}

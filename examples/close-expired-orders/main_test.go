package main

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"testing"
)

// TestNoExitAfterDefer: no function of the examples exits the process
// (log.Fatal*, os.Exit) after a defer, which would then never run: the
// example used to defer Unlock and then log.Fatalf, leaving the lock held
// until its lease ran out. Examples are copied; their shape must be right.
func TestNoExitAfterDefer(t *testing.T) {
	files, err := filepath.Glob("../*/*.go")
	if err != nil || len(files) == 0 {
		t.Fatalf("no example sources found (%v)", err)
	}
	for _, file := range files {
		f, err := parser.ParseFile(token.NewFileSet(), file, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, decl := range f.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok || fn.Body == nil {
				continue
			}
			var deferred string
			ast.Inspect(fn.Body, func(n ast.Node) bool {
				switch n := n.(type) {
				case *ast.FuncLit:
					return false // a closure's defers are its own
				case *ast.DeferStmt:
					deferred = callName(n.Call.Fun) // the latest, for the message
				case *ast.CallExpr:
					if name := callName(n.Fun); deferred != "" && exits[name] {
						t.Errorf("%s: %s calls %s after defer %s, which then never runs: return an error instead", file, fn.Name.Name, name, deferred)
					}
				}
				return true
			})
		}
	}
}

// exits are the calls that end the process without running deferred calls.
var exits = map[string]bool{"log.Fatal": true, "log.Fatalf": true, "log.Fatalln": true, "os.Exit": true}

// callName names a called function as pkg.Name or x.Method.
func callName(e ast.Expr) string {
	if sel, ok := e.(*ast.SelectorExpr); ok {
		if x, ok := sel.X.(*ast.Ident); ok {
			return x.Name + "." + sel.Sel.Name
		}
		return "?." + sel.Sel.Name
	}
	if id, ok := e.(*ast.Ident); ok {
		return id.Name
	}
	return "?"
}

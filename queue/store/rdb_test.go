package store

import (
	"database/sql"
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// SQLite binds a $N by where it first appears, not by N ($2 before $1
// takes the first argument), so every statement the store writes numbers
// its parameters in order of first appearance. The literals are checked
// here; rowsSQL numbers its rows in order by construction.
func TestParametersInOrderOfFirstAppearance(t *testing.T) {
	db, err := sql.Open("sqlite3", ":memory:")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var a, b, c string
	if err := db.QueryRow(`SELECT $2, $1`, "one", "two").Scan(&a, &b); err != nil || a != "one" {
		t.Fatalf("SQLite bound $2 before $1 to %q, %q (%v): the rule may go", a, b, err)
	}
	if err := db.QueryRow(`SELECT $1, $2, $1`, "one", "two").Scan(&a, &b, &c); err != nil || a+b+c != "onetwoone" {
		t.Fatalf("$1, $2, $1: %q %q %q (%v)", a, b, c, err)
	}
	if outOfOrder(`SELECT $1, $2, $1, '$', $3`) != "" || outOfOrder(`SELECT $1, $3, $2`) != "$3 where $2 was due" ||
		outOfOrder(`epoch = $2 AND at < $3`) != "" || outOfOrder(`SELECT $2`) != "$2 where $1 was due" || outOfOrder(`a = $3 AND b = $2`) != "$2 where $4 was due" {
		t.Fatal("outOfOrder does not tell")
	}
	files, _ := filepath.Glob("*.go")
	schema, _ := filepath.Glob("schema/*.go")
	n := 0
	for _, f := range append(files, schema...) {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		fs := token.NewFileSet()
		file, err := parser.ParseFile(fs, f, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(file, func(x ast.Node) bool {
			if l, ok := x.(*ast.BasicLit); ok && l.Kind == token.STRING {
				s, _ := strconv.Unquote(l.Value)
				if bad := outOfOrder(s); bad != "" {
					t.Errorf("%s: %s", fs.Position(l.Pos()), bad)
				}
				n++
			}
			return true
		})
	}
	if n < 100 {
		t.Fatalf("checked %d literals: the files were not found", n)
	}
}

var dollarN = regexp.MustCompile(`\$([0-9]+)`)

// outOfOrder names the first $N of query out of order of first appearance.
// A fragment (not a whole statement) may start at any N: its statement's
// earlier parts hold the lower ones.
func outOfOrder(query string) string {
	next, seen := 1, map[int]bool{}
	for i, m := range dollarN.FindAllStringSubmatch(query, -1) {
		k, _ := strconv.Atoi(m[1])
		if i == 0 && !statement.MatchString(query) {
			next = k
		}
		if seen[k] {
			continue
		}
		if k != next {
			return "$" + m[1] + " where $" + strconv.Itoa(next) + " was due"
		}
		seen[k], next = true, k+1
	}
	return ""
}

var statement = regexp.MustCompile(`^\s*(SELECT|INSERT|UPDATE|DELETE|WITH)\b`)

package store

import (
	"context"
	"database/sql"
	"testing"
)

// Query and QueryRow are the readers' Context methods without a
// context, for the tests' checks of the tables.
func (r *rdb) Query(query string, args ...any) (*sql.Rows, error) {
	return r.QueryContext(context.Background(), query, args...)
}

func (r *rdb) QueryRow(query string, args ...any) *sql.Row {
	return r.QueryRowContext(context.Background(), query, args...)
}

// Rebind numbers the placeholders, not a ? inside a string or a quoted name.
func TestRebindNumbersPlaceholdersOutsideQuotes(t *testing.T) {
	got := Rebind(`SELECT '?', "a?b" FROM t WHERE x = ? AND y = '' AND z IN (?, ?)`)
	if want := `SELECT '?', "a?b" FROM t WHERE x = $1 AND y = '' AND z IN ($2, $3)`; got != want {
		t.Fatalf("Rebind: %s, want %s", got, want)
	}
}

// SQLite binds a $N by where it first appears, not by N ($2 before $1
// takes the first argument), so the dialect refuses a $N out of order.
func TestDollarParametersInOrderOfFirstAppearance(t *testing.T) {
	db, err := sql.Open("sqlite3", ":memory:")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var a, b, c string
	if err := db.QueryRow(`SELECT $2, $1`, "one", "two").Scan(&a, &b); err != nil || a != "one" {
		t.Fatalf("SQLite bound $2 before $1 to %q, %q (%v): the check may go", a, b, err)
	}
	d := &dialect{}
	if q := d.sql(`SELECT $1, $2, $1, '$', ?`); q != `SELECT $1, $2, $1, '$', ?` {
		t.Fatalf("in order: %s", q)
	}
	if err := db.QueryRow(d.sql(`SELECT $1, $2, $1`), "one", "two").Scan(&a, &b, &c); err != nil || a+b+c != "onetwoone" {
		t.Fatalf("$1, $2, $1: %q %q %q (%v)", a, b, c, err)
	}
	for _, q := range []string{`SELECT $2, $1`, `SELECT $1, $3, $2`} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: not refused", q)
				}
			}()
			d.sql(q)
		}()
	}
}

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

package store

import (
	"context"
	"database/sql"
)

// Query and QueryRow are the readers' Context methods without a
// context, for the tests' checks of the tables.
func (r *rdb) Query(query string, args ...any) (*sql.Rows, error) {
	return r.QueryContext(context.Background(), query, args...)
}

func (r *rdb) QueryRow(query string, args ...any) *sql.Row {
	return r.QueryRowContext(context.Background(), query, args...)
}

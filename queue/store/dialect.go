package store

import (
	"errors"

	"github.com/jackc/pgx/v5/pgconn"
	sqlite3 "github.com/mattn/go-sqlite3"
)

// Statements number their parameters $1, $2, ... in order of first
// appearance (SQLite binds a $N by where it first appears, not by N:
// TestParametersInOrderOfFirstAppearance); Store.pg and what follows hold
// where the engines differ.

// duplicate is whether err is a unique-constraint violation.
func duplicate(err error) bool {
	var se sqlite3.Error
	var pe *pgconn.PgError
	return errors.As(err, &se) && se.ExtendedCode == sqlite3.ErrConstraintUnique ||
		errors.As(err, &pe) && pe.Code == "23505"
}

// retryable is whether a PostgreSQL transaction failed only for another
// (serialization failure, deadlock).
func retryable(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && (pe.Code == "40001" || pe.Code == "40P01")
}

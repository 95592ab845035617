// Package rules holds the queue's decisions as pure functions: the state a
// job takes from its task counters, the state a task takes after a result
// or an expiry, and who holds the master lease. No I/O, no clock, no
// locks: the store applies them inside its write transactions (so a rule
// always sees the rows it decides on), the service calls them for its
// answers, and their tests are tables.
package rules

// Package shoptest starts the shop for tests: a running Instance on a loopback port with its
// own throwaway Redis and SQLite file, stopped when the test ends.
package shoptest

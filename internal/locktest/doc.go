// Package locktest holds helpers shared by the tests of several packages. It reads dlock's
// locks as Redis holds them, for tests that must check what a lock left behind: it is the one
// place outside dlock's Redis layer that knows the layout of a lock hash (o = owner, empty
// once released; h = hold count), so a layout change is mended here once. It counts the
// goroutines a code path starts, for tests that a hot path starts none, and gives a log
// destination that background goroutines may write to while a test reads it (LogBuffer).
package locktest

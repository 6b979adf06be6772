// Package locktest reads dlock's locks as Redis holds them, for tests that must check what a
// lock left behind. It is the one place outside dlock's Redis layer that knows the layout of a
// lock hash (o = owner, empty once released; h = hold count), so a layout change is mended
// here once.
package locktest

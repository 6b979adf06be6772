//go:build !chaos

package chaos

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain checks the tests that run without the chaos tag (make test) for leaked goroutines;
// with the tag, bank_test.go's TestMain does the same for the whole suite.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

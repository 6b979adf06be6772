package keyfunc_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/lockguard/lockguard/keyfunc"
)

// A nil *Func is a server's mistake (a key function never built): Key answers it with an
// error naming it, which no adapter may blame on the request; the questions an adapter asks
// at start-up answer as for a Func without parts; builder methods panic saying why.
func TestNilFunc(t *testing.T) {
	var f *keyfunc.Func
	src := &keyfunc.MapSource{Params: map[string]string{"id": "1"}}

	k, err := f.Key(src)
	switch {
	case err == nil:
		t.Fatalf("Key on a nil *Func gave %q and no error", k)
	case !strings.Contains(err.Error(), "nil *Func"):
		t.Errorf("Key on a nil *Func: %q does not name the nil *Func", err)
	case keyfunc.IsInputError(err):
		t.Errorf("Key on a nil *Func: %v counts as the request's fault", err)
	}
	var pe *keyfunc.PartError
	if errors.As(err, &pe) {
		t.Errorf("Key on a nil *Func: %v blames part %q", err, pe.Part)
	}

	if f.UsesIdempotencyKey() {
		t.Error("UsesIdempotencyKey of a nil *Func: true")
	}
	if p := f.RequiredParams(); p != nil {
		t.Errorf("RequiredParams of a nil *Func: %q", p)
	}
	if s := f.String(); s != "" {
		t.Errorf("String of a nil *Func: %q", s)
	}

	for _, tc := range []struct {
		method string
		call   func()
	}{
		{"With", func() { f.With(keyfunc.WithMaxKeyLen(64)) }},
		{"Scope", func() { f.Scope(keyfunc.Const("tenant")) }},
	} {
		t.Run(tc.method, func(t *testing.T) {
			want := "keyfunc: " + tc.method + " on a nil *Func"
			defer func() {
				msg, _ := recover().(string)
				if !strings.HasPrefix(msg, want) {
					t.Errorf("panic %q, want one starting %q", msg, want)
				}
			}()
			tc.call()
		})
	}
}

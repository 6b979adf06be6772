package keyfunc

import (
	"errors"
	"testing"
)

func TestTemplate(t *testing.T) {
	f, err := Template("pay:{user}:{order}", map[string]Part{
		"user":  ContextValue("uid"),
		"order": JSON("order.id").Named("order id"),
	})
	if err != nil {
		t.Fatal(err)
	}
	src := &MapSource{Ctx: ctxWithString("uid", "u:1"), Payload: []byte(`{"order":{"id":7}}`)}
	if k, err := f.Key(src); err != nil || k != "pay:u%3A1:7" {
		t.Errorf("Key = %q, %v", k, err)
	}
	if got := f.String(); got != "pay:{user}:{order id}" {
		t.Errorf("String = %q", got)
	}
	_, err = f.Key(&MapSource{Ctx: src.Ctx, Payload: []byte(`{}`)})
	var pe *PartError
	if !errors.As(err, &pe) || pe.Part != "order id" {
		t.Errorf("Named part error: %v", err)
	}
	rep := MustTemplate("{a}/{a}", map[string]Part{"a": Const("x")})
	if k, _ := rep.Key(&MapSource{}); k != "x/x" {
		t.Errorf("repeated placeholder: %q", k)
	}
}

func TestTemplateErrors(t *testing.T) {
	a := map[string]Part{"a": Const("x")}
	ab := map[string]Part{"a": Const("x"), "b": Const("y")}
	tests := []struct {
		name  string
		tmpl  string
		parts map[string]Part
	}{
		{"empty", "", nil},
		{"unknown placeholder", "k:{a}:{c}", a},
		{"unused part", "k:{a}", ab},
		{"unclosed", "k:{a", a},
		{"stray close", "k}:{a}", a},
		{"empty name", "k:{}", a},
		{"bad name", "k:{a b}", a},
		{"nested brace", "k:{{a}}", a},
		{"adjacent", "{a}{b}", ab},
		{"weak separator", "{a}-{b}", ab},
		{"marker separator", "{a}~{b}", ab},
		// '#' starts the hash of a key over its bound: a literal one followed by a value that
		// spells a hash would give a short key the same text as a truncated one.
		{"hash literal", "k:#{a}", a},
		{"percent literal", "100%:{a}", a},
		{"space literal", "k {a}", a},
		{"non-ASCII literal", "é:{a}", a},
		{"zero part", "{a}", map[string]Part{"a": {}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Template(tt.tmpl, tt.parts)
			if !errors.Is(err, ErrTemplate) {
				t.Errorf("err = %v, want ErrTemplate", err)
			}
		})
	}
	defer func() {
		if recover() == nil {
			t.Error("MustTemplate did not panic")
		}
	}()
	MustTemplate("{a}{b}", ab)
}

package keyfunc_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/lockguard/lockguard/keyfunc"
)

type userKey struct{}

// A payment endpoint: one lock per user and order, whatever else the body holds.
func ExampleTemplate() {
	payKey := keyfunc.MustTemplate("pay:{user}:{order}", map[string]keyfunc.Part{
		"user":  keyfunc.ContextValue(userKey{}).Named("user"),
		"order": keyfunc.JSON("order.id"),
	})
	src := &keyfunc.MapSource{
		Ctx:     context.WithValue(context.Background(), userKey{}, "u-42"),
		Payload: []byte(`{"order": {"id": 1e3, "note": "a:b"}}`),
	}
	key, err := payKey.Key(src)
	fmt.Println(key, err)

	_, err = payKey.Key(&keyfunc.MapSource{Ctx: src.Ctx, Payload: []byte(`{}`)})
	fmt.Println(err, errors.Is(err, keyfunc.ErrMissing))
	// Output:
	// pay:u-42:1000 <nil>
	// keyfunc: part "order": missing value true
}

// Join separates parts with ':' and escapes values, so "a:b"+"c" and "a"+"b:c" differ.
func ExampleJoin() {
	f := keyfunc.Join(keyfunc.Param("account"), keyfunc.Query("currency").Optional())
	for _, q := range []map[string]string{{"currency": "EUR"}, {}} {
		key, _ := f.Key(&keyfunc.MapSource{Params: map[string]string{"account": "acc:7"}, Query: q})
		fmt.Println(key)
	}
	// Output:
	// acc%3A7:EUR
	// acc%3A7:~
}

// Scoping an Idempotency-Key by route and user: two users sending the same key get
// different locks, and nothing in the header can reach another user's scope.
func ExampleFunc_Scope() {
	f := keyfunc.Join(keyfunc.IdempotencyKey()).
		Scope(keyfunc.Meta(keyfunc.MetaRoute), keyfunc.ContextValue(userKey{}).Named("user"))
	for _, user := range []string{"alice", "bob"} {
		key, _ := f.Key(&keyfunc.MapSource{
			Ctx:    context.WithValue(context.Background(), userKey{}, user),
			Meta:   map[string]string{keyfunc.MetaRoute: "/payments"},
			Header: map[string]string{"Idempotency-Key": `"8e03978e-40d5"`},
		})
		fmt.Println(key)
	}
	fmt.Println(f, f.UsesIdempotencyKey())
	// Output:
	// %2Fpayments:alice|8e03978e-40d5
	// %2Fpayments:bob|8e03978e-40d5
	// {route}:{user}|{Idempotency-Key} true
}

// Values longer than the bound are replaced by a fixed-length hash; HashAbove(0) hashes every
// value, here to keep an e-mail address out of the key.
func ExamplePart_HashAbove() {
	f := keyfunc.Join(keyfunc.Const("email"), keyfunc.Query("email").HashAbove(0))
	key, _ := f.Key(&keyfunc.MapSource{Query: map[string]string{"email": "a@example.com"}})
	fmt.Println(len(key), key[:7])
	// Output:
	// 29 email:#
}

// An id the handler parses as a number: every spelling of 42 locks account 42, and an id
// that is no integer is the client's error.
func ExamplePart_Integer() {
	f := keyfunc.MustTemplate("account:{id}", map[string]keyfunc.Part{"id": keyfunc.Param("id").Integer()})
	for _, id := range []string{"42", "042", "+42", "4x2"} {
		key, err := f.Key(&keyfunc.MapSource{Params: map[string]string{"id": id}})
		fmt.Println(key, keyfunc.IsInputError(err))
	}
	// Output:
	// account:42 false
	// account:42 false
	// account:42 false
	//  true
}

package dlock_test

import (
	"errors"
	"strings"

	"github.com/redis/go-redis/v9"
)

var redisNil = redis.Nil

func helperProcess() bool { return helperProcessMain() }

func errorsIs(err, target error) bool { return errors.Is(err, target) }

type redisClusterNode = redis.Client

func splitLines(s string) []string {
	return strings.FieldsFunc(s, func(r rune) bool { return r == '\n' || r == '\r' })
}

package dlock_test

import (
	"errors"

	"github.com/redis/go-redis/v9"
)

var redisNil = redis.Nil

func helperProcess() bool { return helperProcessMain() }

func errorsIs(err, target error) bool { return errors.Is(err, target) }

type redisClusterNode = redis.Client

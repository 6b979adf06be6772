package dlock_test

import "github.com/redis/go-redis/v9"

var redisNil = redis.Nil

func helperProcess() bool { return false }

//go:build tools

// Package tools pins the project's chosen dependencies before every package uses them.
package tools

import (
	_ "github.com/cockroachdb/pebble/v2"
	_ "github.com/prometheus/client_golang/prometheus"
	_ "github.com/redis/go-redis/v9"
	_ "github.com/tidwall/redcon"
)

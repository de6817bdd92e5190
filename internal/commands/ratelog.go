package commands

import "github.com/fenceproxy/fenceproxy/internal/ratelog"

// storeErrorLog rate-limits "fence store cannot issue tokens": a fence store
// that cannot write fails every request.
var storeErrorLog ratelog.EverySecond

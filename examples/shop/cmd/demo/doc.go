// Command demo is what `make demo` runs: it starts the example shop unprotected, drives
// it with the storm, stops it, does the same with the shop protected by ginlock and
// asynqlock, and prints both runs side by side.
//
// Each shop runs in this process with its own throwaway redis-server and SQLite file,
// stopped and removed before the next starts and on Ctrl-C, so the demo leaves no process
// or file behind. It exits 1 when the protected run shows any anomaly, 2 when a run could
// not be made, 130 when interrupted.
package main

package shop

import (
	"fmt"
	"log/slog"
	"os"
)

// asynqLogger routes asynq's log lines to the shop's slog.Logger.
type asynqLogger struct{ l *slog.Logger }

func (l asynqLogger) Debug(args ...any) { l.l.Debug(fmt.Sprint(args...), "component", "asynq") }
func (l asynqLogger) Info(args ...any)  { l.l.Info(fmt.Sprint(args...), "component", "asynq") }
func (l asynqLogger) Warn(args ...any)  { l.l.Warn(fmt.Sprint(args...), "component", "asynq") }
func (l asynqLogger) Error(args ...any) { l.l.Error(fmt.Sprint(args...), "component", "asynq") }

// Fatal logs and exits, as asynq's Logger contract requires.
func (l asynqLogger) Fatal(args ...any) {
	l.l.Error(fmt.Sprint(args...), "component", "asynq")
	os.Exit(1)
}

package storm

import (
	"fmt"
	"io"
	"os"
	"strings"
)

// ProgressLine returns a Config.Progress function that keeps one line on w up to date:
// a bar redrawn in place when w is a terminal, a line every 25 % otherwise (so a CI log
// stays short). Call the returned done function to end the line.
func ProgressLine(w io.Writer, label string) (progress func(done, total int), done func()) {
	tty := isTerminal(w)
	lastQuarter := -1
	progress = func(n, total int) {
		if total <= 0 {
			return
		}
		if tty {
			const width = 30
			filled := n * width / total
			fmt.Fprintf(w, "\r  %-12s [%s%s] %d/%d requests", label,
				strings.Repeat("#", filled), strings.Repeat(".", width-filled), n, total)
			return
		}
		if q := n * 4 / total; q != lastQuarter {
			lastQuarter = q
			fmt.Fprintf(w, "  %-12s %3d%% (%d/%d requests)\n", label, q*25, n, total)
		}
	}
	done = func() {
		if tty {
			fmt.Fprintln(w)
		}
	}
	return progress, done
}

// isTerminal reports whether w is a character device such as a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

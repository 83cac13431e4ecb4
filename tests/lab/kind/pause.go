// SPDX-License-Identifier: GPL-3.0-or-later
// The pod sandbox's process for the kind node image of hpcops.slinky's tests: it holds the
// pod's namespaces, reaps orphans (it is PID 1 when the pod shares its PID namespace) and
// exits on SIGINT or SIGTERM.  Built static by tests/lab/kind_images.py.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	signals := make(chan os.Signal, 4)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for sig := range signals {
		if sig != syscall.SIGCHLD {
			os.Exit(0)
		}
		for {
			var status syscall.WaitStatus
			pid, err := syscall.Wait4(-1, &status, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}

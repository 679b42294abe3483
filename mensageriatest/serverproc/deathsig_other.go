//go:build unix && !linux

package serverproc

import "syscall"

// Only Linux tells a process that its parent died.
func onParentDeath(*syscall.SysProcAttr, syscall.Signal) {}

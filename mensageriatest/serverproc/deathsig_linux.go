package serverproc

import "syscall"

func onParentDeath(a *syscall.SysProcAttr, sig syscall.Signal) { a.Pdeathsig = sig }

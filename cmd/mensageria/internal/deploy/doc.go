// Package deploy holds the tests of the repository's deploy/ directory:
// the systemd units (verified by systemd-analyze, their command lines by
// the command's own flag parsing) and the compose example (its configs
// parsed by the command's config loaders, its health checks pointed at the
// daemons' /healthz and /readyz). It has no code of its own.
package deploy

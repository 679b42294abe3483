// Package model checks the SPIN model of the delivery protocol
// (docs/model/delivery.pml) from go test: the bounded model must pass,
// every deliberate bug must be caught, and every statement of the drivers
// that writes the outbox or the election must be mapped to a step of the
// model in docs/model/README.md. It has no code of its own besides the
// tests.
package model

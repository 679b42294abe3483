// Package openapi holds the contract test of docs/openapi.yaml: the
// document loaded and validated with kin-openapi, compared with the
// HTTP transport's decoder, and every exchange of transport/m2mhttp's
// receiver tests checked against it. It lives in the tests module so that
// neither the core's nor the command's go.mod requires kin-openapi. The
// package itself is empty.
package openapi

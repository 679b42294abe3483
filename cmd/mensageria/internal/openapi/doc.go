// Package openapi holds the contract test of docs/openapi.yaml: the
// document loaded and validated with kin-openapi, compared with the
// HTTP transport's decoder, and every exchange of transport/m2mhttp's
// receiver tests checked against it. It lives in the command's module so
// that the core module's go.mod does not require kin-openapi. The package
// itself is empty.
package openapi

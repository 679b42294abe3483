package m2mhttp

import "testing"

// TestOpenAPIDocument loads docs/openapi.yaml as OpenAPI 3.1 with
// kin-openapi and validates it, including its examples against the
// JSON Schema 2020-12 dialect.
func TestOpenAPIDocument(t *testing.T) {
	doc, _ := contract(t)
	if !doc.IsOpenAPI31OrLater() {
		t.Fatalf("openapi %q: the contract is meant to be 3.1", doc.OpenAPI)
	}
	env := doc.Components.Schemas["Envelope"].Value
	for _, f := range requiredFields {
		found := false
		for _, r := range env.Required {
			found = found || r == f
		}
		if !found {
			t.Errorf("Envelope schema does not require %q, the decoder does", f)
		}
	}
	for f := range envelopeFields {
		if _, ok := env.Properties[f]; !ok {
			t.Errorf("Envelope schema lacks field %q", f)
		}
	}
}

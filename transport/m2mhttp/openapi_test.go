package m2mhttp

import (
	"strings"
	"testing"
)

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

// TestOpenAPIBatch: the batch operation's schemas match the code.
func TestOpenAPIBatch(t *testing.T) {
	doc, _ := contract(t)
	batchRoute(t)
	msgs := doc.Components.Schemas["Batch"].Value.Properties["messages"].Value
	if msgs.Items.Ref != "#/components/schemas/Envelope" || msgs.MinItems != 1 || msgs.MaxItems == nil || *msgs.MaxItems != DefaultMaxBatchItems {
		t.Errorf("Batch.messages: items %q, %d..%v", msgs.Items.Ref, msgs.MinItems, msgs.MaxItems)
	}
	var enum []string
	for _, v := range doc.Components.Schemas["BatchResult"].Value.Properties["status"].Value.Enum {
		enum = append(enum, v.(string))
	}
	want := []string{ItemApplied, ItemDuplicate, ItemRefused, ItemStale, ItemRetry}
	if strings.Join(enum, ",") != strings.Join(want, ",") {
		t.Errorf("BatchResult.status enum %v, want %v", enum, want)
	}
	if _, ok := doc.Webhooks["deliveryBatch"].Post.RequestBody.Value.Content[ContentTypeBatch]; !ok {
		t.Errorf("deliveryBatch does not take %s", ContentTypeBatch)
	}
}

package m2mhttp

import (
	"fmt"
	"strconv"
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
	// The limits are bytes of UTF-8: x-max-bytes says so, and maxLength
	// (characters) is the bound that follows from it.
	for field, limit := range map[string]int{"type": maxTypeLen, "key": maxKeyLen} {
		p := env.Properties[field].Value
		if p.MaxLength == nil || *p.MaxLength != uint64(limit) || fmt.Sprint(p.Extensions["x-max-bytes"]) != fmt.Sprint(limit) ||
			!strings.Contains(p.Description, fmt.Sprintf("%s bytes", humanInt(limit))) || !strings.Contains(p.Description, "surrogate") {
			t.Errorf("Envelope.%s: maxLength %v, x-max-bytes %v, description %q; want %d bytes said three times, and the surrogate refusal", field, p.MaxLength, p.Extensions["x-max-bytes"], p.Description, limit)
		}
	}
	if !strings.Contains(doc.Components.Schemas["Problem"].Value.Properties["type"].Value.Description, "conflict") {
		t.Error("the problem types do not list conflict")
	}
	if r := doc.Webhooks["delivery"].Post.Responses.Status(409); r == nil || !strings.Contains(*r.Value.Description, "conflict") {
		t.Error("409 does not document the conflict")
	}
}

// humanInt writes 1000 as "1,000", as the document does.
func humanInt(n int) string {
	s := strconv.Itoa(n)
	if len(s) > 3 {
		s = s[:len(s)-3] + "," + s[len(s)-3:]
	}
	return s
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

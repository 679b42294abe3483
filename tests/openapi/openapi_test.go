package openapi_test

import (
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/xadm/mensageria/transport/m2mhttp"
)

// TestOpenAPIDocument loads docs/openapi.yaml as OpenAPI 3.1 with
// kin-openapi and validates it, including its examples against the
// JSON Schema 2020-12 dialect.
func TestOpenAPIDocument(t *testing.T) {
	doc, _ := contract(t)
	rules := recorded(t).rules
	if !doc.IsOpenAPI31OrLater() {
		t.Fatalf("openapi %q: the contract is meant to be 3.1", doc.OpenAPI)
	}
	env := doc.Components.Schemas["Envelope"].Value
	for _, f := range rules.Required {
		found := false
		for _, r := range env.Required {
			found = found || r == f
		}
		if !found {
			t.Errorf("Envelope schema does not require %q, the decoder does", f)
		}
	}
	for _, f := range rules.Fields {
		if _, ok := env.Properties[f]; !ok {
			t.Errorf("Envelope schema lacks field %q", f)
		}
	}
	// The limits are bytes of UTF-8, said so by x-max-bytes and in the
	// description; maxLength, which counts characters, is not there to be
	// taken for the limit.
	for field, limit := range map[string]int{"type": rules.MaxTypeLen, "key": rules.MaxKeyLen} {
		p := env.Properties[field].Value
		if p.MaxLength != nil || fmt.Sprint(p.Extensions["x-max-bytes"]) != fmt.Sprint(limit) ||
			!strings.Contains(p.Description, fmt.Sprintf("%s bytes", humanInt(limit))) || !strings.Contains(p.Description, "surrogate") {
			t.Errorf("Envelope.%s: maxLength %v, x-max-bytes %v, description %q; want no maxLength, %d bytes said twice, and the surrogate refusal", field, p.MaxLength, p.Extensions["x-max-bytes"], p.Description, limit)
		}
	}
	// The range of created_at the decoder holds is stated; the zero time
	// once slipped through as "unknown".
	if d := env.Properties["created_at"].Value.Description; rules.MinCreatedAt == "" || !strings.Contains(d, rules.MinCreatedAt) {
		t.Errorf("Envelope.created_at %q does not state the earliest accepted, %s", d, rules.MinCreatedAt)
	}
	for _, field := range []string{"payload", "headers"} {
		if d := env.Properties[field].Value.Description; !strings.Contains(d, "NUL") || !strings.Contains(d, "surrogate") {
			t.Errorf("Envelope.%s %q does not state the refusal of NUL and unpaired surrogates", field, d)
		}
	}
	// maxLength is left only where a pattern holds the value to printable
	// ASCII, one byte a character.
	_, route := contract(t)
	for _, p := range route.Operation.Parameters {
		if s := p.Value.Schema.Value; s.MaxLength != nil && s.Pattern != `^[\x20-\x7e]+$` {
			t.Errorf("parameter %s: maxLength %d on a value not held to printable ASCII", p.Value.Name, *s.MaxLength)
		}
	}
	// The default dialect of OpenAPI 3.1 already is the OAS base one;
	// naming it makes Prism skip the validation of bodies altogether.
	if doc.JSONSchemaDialect != "" {
		t.Errorf("jsonSchemaDialect %q: leave it to the default, which contract tools validate bodies with", doc.JSONSchemaDialect)
	}
	if len(doc.Webhooks) != 0 {
		t.Errorf("webhooks %v: the operation lives under paths alone, for the tools that read only paths", doc.Webhooks)
	}
	if !strings.Contains(doc.Components.Schemas["Problem"].Value.Properties["type"].Value.Description, "conflict") {
		t.Error("the problem types do not list conflict")
	}
	if r := route.Operation.Responses.Status(409); r == nil || !strings.Contains(*r.Value.Description, "conflict") {
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
	if msgs.Items.Ref != "#/components/schemas/Envelope" || msgs.MinItems != 1 || msgs.MaxItems == nil || *msgs.MaxItems != m2mhttp.DefaultMaxBatchItems {
		t.Errorf("Batch.messages: items %q, %d..%v", msgs.Items.Ref, msgs.MinItems, msgs.MaxItems)
	}
	var enum []string
	for _, v := range doc.Components.Schemas["BatchResult"].Value.Properties["status"].Value.Enum {
		enum = append(enum, v.(string))
	}
	want := []string{m2mhttp.ItemApplied, m2mhttp.ItemDuplicate, m2mhttp.ItemRefused, m2mhttp.ItemStale, m2mhttp.ItemRetry}
	if strings.Join(enum, ",") != strings.Join(want, ",") {
		t.Errorf("BatchResult.status enum %v, want %v", enum, want)
	}
	op := batchRoute(t).Operation
	if _, ok := op.RequestBody.Value.Content[m2mhttp.ContentTypeBatch]; !ok {
		t.Errorf("deliver does not take %s", m2mhttp.ContentTypeBatch)
	}
	if _, ok := op.Responses.Status(200).Value.Content[m2mhttp.ContentTypeBatch]; !ok {
		t.Errorf("deliver does not answer %s", m2mhttp.ContentTypeBatch)
	}
}

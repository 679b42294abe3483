package openapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"maps"
	"mime"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"

	"github.com/xadm/mensageria/internal/testdb"
	"github.com/xadm/mensageria/transport/m2mhttp"
)

// The repository's top directory, seen from this package.
const root = "../.."

var openAPIPath = filepath.Join(root, "docs/openapi.yaml")

var (
	contractOnce sync.Once
	contractDoc  *openapi3.T
	contractErr  error
)

// contract loads docs/openapi.yaml once per test binary.
func contract(t testing.TB) (*openapi3.T, *routers.Route) {
	t.Helper()
	contractOnce.Do(func() {
		l := openapi3.NewLoader()
		contractDoc, contractErr = l.LoadFromFile(openAPIPath)
		if contractErr == nil {
			contractErr = contractDoc.Validate(context.Background())
		}
	})
	if contractErr != nil {
		t.Fatalf("docs/openapi.yaml: %v", contractErr)
	}
	item := contractDoc.Paths.Value(contractPath)
	if item == nil || item.Post == nil {
		t.Fatalf("docs/openapi.yaml has no paths[%q].post", contractPath)
	}
	return contractDoc, &routers.Route{Spec: contractDoc, Path: contractPath, PathItem: item, Method: http.MethodPost, Operation: item.Post}
}

// contractPath is where the contract writes its one operation, deliver: a
// receiver serves it at a URL of its own.
const contractPath = "/"

// batchRoute is the contract's operation, which takes batches by their
// media type.
func batchRoute(t testing.TB) *routers.Route {
	t.Helper()
	_, route := contract(t)
	return route
}

// routeOf picks the contract's operation, which tells single deliveries
// and batches apart by the media type, as the receiver does.
func routeOf(t testing.TB, r *http.Request) *routers.Route {
	if mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); mt == m2mhttp.ContentTypeBatch {
		return batchRoute(t)
	}
	_, route := contract(t)
	return route
}

func checkExchange(t testing.TB, route *routers.Route, r *http.Request, reqBody []byte, status int, header http.Header, respBody []byte) {
	t.Helper()
	req := r.Clone(context.Background())
	req.Body = io.NopCloser(bytes.NewReader(reqBody))
	opts := &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc, IncludeResponseStatus: true}
	in := &openapi3filter.RequestValidationInput{Request: req, Route: route, Options: opts}
	// A batch is taken (200) even when some of its envelopes are
	// malformed; those are refused in their results, and the request
	// conforms only when none is.
	if status == http.StatusOK && !bytes.Contains(respBody, []byte(m2mhttp.ProblemMalformed)) {
		if err := openapi3filter.ValidateRequest(context.Background(), in); err != nil {
			t.Errorf("accepted request does not conform to docs/openapi.yaml: %v\nbody: %s", err, reqBody)
		}
	}
	out := &openapi3filter.ResponseValidationInput{RequestValidationInput: in, Status: status, Header: header, Options: opts}
	out.SetBodyBytes(respBody)
	if err := openapi3filter.ValidateResponse(context.Background(), out); err != nil {
		t.Errorf("response %d does not conform to docs/openapi.yaml: %v\nbody: %s", status, err, respBody)
	}
}

// The shapes transport/m2mhttp's tests record (helpers_test.go there).
type (
	exchange struct {
		Method         string      `json:"method"`
		URL            string      `json:"url"`
		Header         http.Header `json:"header"`
		Body           []byte      `json:"body"`
		Status         int         `json:"status"`
		ResponseHeader http.Header `json:"response_header"`
		ResponseBody   []byte      `json:"response_body"`
	}
	decoderRules struct {
		Required     []string `json:"required"`
		Fields       []string `json:"fields"`
		MaxTypeLen   int      `json:"max_type_len"`
		MaxKeyLen    int      `json:"max_key_len"`
		MinCreatedAt string   `json:"min_created_at"`
	}
)

// receiverTests are transport/m2mhttp's tests whose receivers serve under
// its conforms wrapper: the end-to-end runs, the queue handler and the
// receiver's fixtures.
const receiverTests = "^(TestEndToEnd|TestQueueHandler|TestReceiver)"

type recording struct {
	rules     decoderRules
	exchanges map[string]exchange
}

var (
	recordOnce sync.Once
	recordRes  recording
	recordErr  string
)

// recorded runs transport/m2mhttp's receiver tests once per test binary,
// with their exchanges and the decoder's rules written to a directory
// (m2mhttp's EnvOpenAPIRecord), and reads them back.
func recorded(t *testing.T) recording {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		testdb.Unavailable(t, "the go command", err)
	}
	recordOnce.Do(func() {
		dir, err := os.MkdirTemp("", "mensageria-openapi-")
		if err != nil {
			recordErr = err.Error()
			return
		}
		defer os.RemoveAll(dir)
		cmd := exec.Command(goBin, "test", "-count=1", "-run", receiverTests, ".")
		cmd.Dir = filepath.Join(root, "transport/m2mhttp")
		cmd.Env = append(os.Environ(), "MENSAGERIA_OPENAPI_RECORD="+dir)
		if out, err := cmd.CombinedOutput(); err != nil {
			recordErr = "transport/m2mhttp's receiver tests: " + err.Error() + "\n" + string(out)
			return
		}
		recordRes.exchanges = map[string]exchange{}
		files, _ := filepath.Glob(filepath.Join(dir, "*.json"))
		for _, f := range files {
			b, err := os.ReadFile(f)
			if err != nil {
				recordErr = err.Error()
				return
			}
			if filepath.Base(f) == "rules.json" {
				err = json.Unmarshal(b, &recordRes.rules)
			} else {
				var e exchange
				err = json.Unmarshal(b, &e)
				recordRes.exchanges[filepath.Base(f)] = e
			}
			if err != nil {
				recordErr = f + ": " + err.Error()
				return
			}
		}
		if len(recordRes.exchanges) == 0 || len(recordRes.rules.Required) == 0 {
			recordErr = "transport/m2mhttp's receiver tests recorded no exchange (were they skipped?)"
		}
	})
	if recordErr != "" {
		t.Fatal(recordErr)
	}
	return recordRes
}

// TestOpenAPIExchanges: every exchange the receivers of transport/m2mhttp's
// tests serve conforms to docs/openapi.yaml: each response always, and the
// request whenever the receiver accepted it (a refused request is wrong on
// purpose).
func TestOpenAPIExchanges(t *testing.T) {
	rec := recorded(t)
	contract(t)
	statuses := map[int]bool{}
	for name, e := range rec.exchanges {
		r, err := http.NewRequest(e.Method, "http://receiver"+e.URL, bytes.NewReader(e.Body))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		r.Header = e.Header
		checkExchange(t, routeOf(t, r), r, e.Body, e.Status, e.ResponseHeader, e.ResponseBody)
		statuses[e.Status] = true
	}
	if !statuses[http.StatusOK] || len(statuses) < 2 {
		t.Errorf("the exchanges checked answered only %v; the receiver tests serve accepted and refused requests", statuses)
	}
	t.Logf("%d exchanges checked, statuses %v", len(rec.exchanges), slices.Sorted(maps.Keys(statuses)))
}

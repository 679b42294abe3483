package mensageria

import "encoding/json"

// decodeHeaders reads the stored headers object. Rows inserted by hand may
// hold anything; a malformed object is dropped rather than failing the
// delivery of an otherwise good message.
func decodeHeaders(b []byte) map[string]string {
	if len(b) == 0 {
		return nil
	}
	var h map[string]string
	if err := json.Unmarshal(b, &h); err != nil {
		return nil
	}
	return h
}

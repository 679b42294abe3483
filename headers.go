package mensageria

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/xadm/mensageria/driver"
)

// unreadable says why a claimed row cannot be sent as it is stored, naming
// the column: what its driver could not read (driver.Job.Unreadable), then
// what no transport could carry (headers that are not a JSON object of
// strings, a created_at outside RFC 3339's years). "" for a good row. Such
// a row would fail on every attempt, or be sent without what it holds, so
// the relay parks it dead at once instead.
// d is j as toDelivery made it: its headers decoded once, and decoded
// again here only when that gave none.
func unreadable(j *driver.Job, d *Delivery) string {
	why := j.Unreadable
	if len(j.Headers) > 0 && d.Headers == nil {
		var h map[string]string
		if err := json.Unmarshal(j.Headers, &h); err != nil {
			why = driver.UnreadableColumn(why, "headers", "is not a JSON object of string values")
		}
	}
	// A time the driver could not read is named already.
	if y := j.CreatedAt.UTC().Year(); !strings.Contains(j.Unreadable, "created_at") && (y < 1 || y > 9999) {
		why = driver.UnreadableColumn(why, "created_at", fmt.Sprintf("is out of range (%s): years 1 to 9999 in UTC", j.CreatedAt.UTC().Format(time.RFC3339Nano)))
	}
	return why
}

// decodeHeaders reads the stored headers object. A claimed row whose
// headers do not decode never gets here (unreadable parks it); a listed
// one shows without them.
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

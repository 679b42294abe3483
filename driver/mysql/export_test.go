package mysql

import "reflect"

// Queries are the driver's statements by field name, each list
// ({{ids}}, {{types}}, {{ordered}}) of two placeholders and each INSERT
// of many rows of two rows, as tests prepare and explain them.
func Queries(d *Driver) map[string]string {
	out := map[string]string{}
	q := reflect.ValueOf(d.q)
	for i := range q.NumField() {
		text := withLists(withList(q.Field(i).String(), 2), 2, 2)
		if name := q.Type().Field(i).Name; name == "insert" || name == "insertScheduled" {
			text = withRows(text, 2)
		}
		out[q.Type().Field(i).Name] = text
	}
	return out
}

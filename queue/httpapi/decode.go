package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"reflect"
	"strings"
	"unicode/utf8"

	"github.com/harvest-hpc/harvest/internal/jsonkeys"
	"github.com/harvest-hpc/harvest/queue/api"
)

func invalid(format string, a ...any) error {
	return fmt.Errorf("%w: %s", api.ErrInvalid, fmt.Sprintf(format, a...))
}

// decode reads one JSON object strictly, rejecting what encoding/json
// lets through (issue 13 item 7): a Content-Type other than
// application/json (a utf-8 charset may be named), keys that match a field
// only without regard to case, duplicate keys, null where the field cannot
// be null (inside a command argv it became ""), unknown fields, trailing
// data and bodies over limit. Every request body of the API goes through
// here except the pilots' heartbeats (decodeBulk).
func decode(w http.ResponseWriter, r *http.Request, limit int64, v any) error {
	if err := contentType(r); err != nil {
		return err
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return fmt.Errorf("%w: the limit is %d bytes", api.ErrTooLarge, limit)
		}
		return invalid("reading the body: %v", err)
	}
	if len(bytes.TrimSpace(body)) == 0 {
		return invalid("empty body: a JSON object is required")
	}
	if !utf8.Valid(body) {
		// encoding/json would put U+FFFD in place of the bad bytes, and a
		// command or name would silently differ from what was sent.
		return invalid("the body is not valid UTF-8")
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := strict(dec, reflect.TypeOf(v).Elem(), "body"); err != nil {
		return invalid("malformed JSON: %v", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return invalid("malformed JSON: data after the object")
	}
	dec = json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return invalid("malformed JSON: %v", err)
	}
	return nil
}

// DecodeStrict is decode for the other endpoints served beside the API
// (the agent's /v1/admin/harvest, drain and tokens/rotate): the same
// refusals, so no endpoint is laxer than the API.
func DecodeStrict(w http.ResponseWriter, r *http.Request, limit int64, v any) error {
	return decode(w, r, limit, v)
}

// decodeBulk reads the pilots' heartbeats, which list every task a
// master holds, without the strict pass (token by token, it would double
// their parsing cost): unknown fields and data after the object are
// refused as there, and so are the keys and nulls the strict pass refuses
// (duplicate, case-folded, not a field's exact name; null where the field
// cannot be null, which encoding/json reads as 0) by one scan of the
// bytes (jsonkeys).
func decodeBulk(w http.ResponseWriter, r *http.Request, limit int64, v any) error {
	if err := contentType(r); err != nil {
		return err
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return fmt.Errorf("%w: the limit is %d bytes", api.ErrTooLarge, limit)
		}
		return invalid("reading the body: %v", err)
	}
	if err := strictBulk(body, v); err != nil {
		return err
	}
	if err := jsonkeys.For(reflect.TypeOf(v).Elem(), false).Check(body); err != nil {
		return invalid("malformed JSON: %v", err)
	}
	return nil
}

// strictBulk decodes one JSON object, refusing unknown fields and data
// after it, with the API's errors.
func strictBulk(body []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		if errors.Is(err, io.EOF) {
			return invalid("empty body: a JSON object is required")
		}
		return invalid("malformed JSON: %v", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return invalid("malformed JSON: data after the object")
	}
	return nil
}

// contentType accepts no Content-Type (curl -d sends one, but scripts may
// not) or exactly application/json, with at most a utf-8 charset.
func contentType(r *http.Request) error {
	ct := r.Header.Get("Content-Type")
	if ct == "" {
		return nil
	}
	mt, params, err := mime.ParseMediaType(ct)
	if err != nil || mt != "application/json" {
		return invalid("Content-Type must be application/json, got %q", ct)
	}
	for k, v := range params {
		if k != "charset" || !strings.EqualFold(v, "utf-8") {
			return invalid("Content-Type must be application/json (charset utf-8 at most), got %q", ct)
		}
	}
	return nil
}

var unmarshaler = reflect.TypeFor[json.Unmarshaler]()

// strict walks the next JSON value against the Go type it will decode
// into: object keys must match a field's name exactly and appear once,
// and null may stand only where the type can hold it.
func strict(dec *json.Decoder, t reflect.Type, where string) error {
	if scalarList(t) {
		return strictScalars(dec, where)
	}
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	if tok == nil {
		switch t.Kind() {
		case reflect.Pointer, reflect.Interface, reflect.Slice, reflect.Map:
			return nil
		}
		return fmt.Errorf("null is not a valid %s", where)
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	opaque := t.Kind() == reflect.Interface || reflect.PointerTo(t).Implements(unmarshaler)
	d, ok := tok.(json.Delim)
	if !ok {
		return nil // a scalar: encoding/json checks its type
	}
	switch d {
	case '[':
		elem := t
		if !opaque && (t.Kind() == reflect.Slice || t.Kind() == reflect.Array) {
			elem = t.Elem()
		} else {
			opaque = true
		}
		for i := 0; dec.More(); i++ {
			et := elem
			if opaque {
				et = reflect.TypeFor[any]()
			}
			if err := strict(dec, et, fmt.Sprintf("%s[%d]", where, i)); err != nil {
				return err
			}
		}
	case '{':
		var fields map[string]reflect.Type
		if !opaque && t.Kind() == reflect.Struct {
			fields = jsonFields(t)
		}
		seen := map[string]bool{}
		for dec.More() {
			kt, err := dec.Token()
			if err != nil {
				return err
			}
			k, _ := kt.(string)
			if seen[k] {
				return fmt.Errorf("duplicate key %q in %s", k, where)
			}
			seen[k] = true
			vt := reflect.TypeFor[any]()
			switch {
			case fields != nil:
				ft, ok := fields[k]
				if !ok {
					return fmt.Errorf("unknown field %q in %s (names are case-sensitive)", k, where)
				}
				vt = ft
			case !opaque && t.Kind() == reflect.Map:
				vt = t.Elem()
			}
			if err := strict(dec, vt, k); err != nil {
				return err
			}
		}
	}
	_, err = dec.Token() // the closing delimiter
	return err
}

// scalarList reports whether t is a list of numbers, strings or booleans
// (a pilot's ids, names and attempts: thousands of elements, too many to
// walk token by token).
func scalarList(t reflect.Type) bool {
	if t.Kind() != reflect.Slice && t.Kind() != reflect.Array {
		return false
	}
	e := t.Elem()
	if reflect.PointerTo(e).Implements(unmarshaler) {
		return false
	}
	switch e.Kind() {
	case reflect.Bool, reflect.String, reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Float32, reflect.Float64:
		return true
	}
	return false
}

// strictScalars reads the next value whole and refuses a null inside it
// (the list itself may be null): in a list of scalars a bare n outside a
// string can only start null. Types are left to the decoding pass.
func strictScalars(dec *json.Decoder, where string) error {
	var raw json.RawMessage
	if err := dec.Decode(&raw); err != nil {
		return err
	}
	if len(raw) == 0 || raw[0] != '[' {
		return nil // null, or not a list: the decoding pass says what is wrong
	}
	in, esc := false, false
	for _, c := range raw {
		switch {
		case esc:
			esc = false
		case in && c == '\\':
			esc = true
		case c == '"':
			in = !in
		case !in && c == 'n':
			return fmt.Errorf("null is not a valid element of %s", where)
		}
	}
	return nil
}

// jsonFields maps the JSON names of a struct's fields (embedded structs'
// fields included) to their types.
func jsonFields(t reflect.Type) map[string]reflect.Type {
	out := map[string]reflect.Type{}
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		if tag == "-" || (!f.IsExported() && !f.Anonymous) {
			continue
		}
		name, _, _ := strings.Cut(tag, ",")
		if f.Anonymous && name == "" {
			ft := f.Type
			if ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				for k, v := range jsonFields(ft) {
					out[k] = v
				}
				continue
			}
		}
		if name == "" {
			name = f.Name
		}
		out[name] = f.Type
	}
	return out
}

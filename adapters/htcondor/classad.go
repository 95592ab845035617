package htcondor

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
)

// ErrMalformed is wrapped by every parse error: the command answered, but
// not with something this adapter can trust. Callers must not act on it.
var ErrMalformed = errors.New("malformed HTCondor output")

// errTooManyAds marks an answer refused for holding more ads than the
// bound (a kind of ErrMalformed).
var errTooManyAds = fmt.Errorf("%w: too many ads", ErrMalformed)

func malformed(format string, a ...any) error {
	return fmt.Errorf("%w: %s", ErrMalformed, fmt.Sprintf(format, a...))
}

// expr is an unevaluated ClassAd expression ("\/Expr(...)\/" in JSON, a
// bare expression in the long format). The adapter never evaluates
// expressions; it only recognises a few documented shapes.
type expr string

// ad is one ClassAd with attribute names folded to lower case (ClassAd
// attribute names are case-insensitive). Values are int64, float64,
// string, bool, nil (undefined) or expr.
type ad map[string]any

// maxAds bounds how many ads one answer may hold when no smaller bound
// is given, so a runaway or hostile output cannot exhaust memory. Far
// above any real pool or queue.
const maxAds = 1_000_000

// readJSONAds reads the -json output of condor_q/condor_status, a JSON
// array of objects, as it comes, one ad at a time, handing each to each:
// only one ad is held decoded at a time, never the whole answer (up to
// the output cap) nor all its ads as maps. More than max ads is an error.
// Empty output is zero ads (condor_q prints nothing at all when no job
// matches).
func readJSONAds(r io.Reader, max int, each func(ad) error) error {
	dec := json.NewDecoder(r)
	dec.UseNumber()
	tok, err := dec.Token()
	if err == io.EOF {
		return nil // empty output (or only white space): no ads
	}
	if err != nil || tok != json.Delim('[') {
		return malformed("not a JSON array of ClassAds: starts with %v %v", tok, err)
	}
	for i := 0; dec.More(); i++ {
		if i >= max {
			return fmt.Errorf("%w: more than %d", errTooManyAds, max)
		}
		var obj map[string]any
		if err := dec.Decode(&obj); err != nil {
			return malformed("not a JSON array of ClassAds: element %d: %v", i, err)
		}
		if obj == nil {
			return malformed("element %d is not a ClassAd object", i)
		}
		a := make(ad, len(obj))
		for k, v := range obj {
			a[strings.ToLower(k)] = jsonValue(v)
		}
		if err := each(a); err != nil {
			return err
		}
	}
	if tok, err := dec.Token(); err != nil || tok != json.Delim(']') {
		return malformed("not a JSON array of ClassAds: unterminated (%v)", err)
	}
	if tok, err := dec.Token(); err != io.EOF {
		return malformed("trailing data after the JSON array: %v %v", tok, err)
	}
	return nil
}

func jsonValue(v any) any {
	switch x := v.(type) {
	case json.Number:
		if i, err := strconv.ParseInt(string(x), 10, 64); err == nil {
			return i
		}
		if f, err := strconv.ParseFloat(string(x), 64); err == nil {
			return f
		}
		return expr(x)
	case string:
		// HTCondor writes expressions as "\/Expr(...)\/"; the JSON decoder
		// has already turned "\/" into "/".
		if strings.HasPrefix(x, "/Expr(") && strings.HasSuffix(x, ")/") {
			return expr(x[len("/Expr(") : len(x)-len(")/")])
		}
		return x
	default:
		return v // bool, nil, nested lists and ads (unused here)
	}
}

// parseLongAds reads the -long output: "Name = value" lines, one ad per
// block, each ad ended by a blank line (condor_q and condor_status print
// one after every ad: CondorClassAdListWriter::appendAd in
// src/condor_utils/compat_classad.cpp). An ad without it was cut off, and
// its missing attributes would read as 0: it is an error.
func parseLongAds(data []byte) ([]ad, error) {
	var out []ad
	err := readLongAds(bytes.NewReader(data), maxAds, func(a ad) error { out = append(out, a); return nil })
	return out, err
}

// readLongAds reads -long output as it comes, handing each ad to each.
// More than max ads is an error.
func readLongAds(r io.Reader, max int, each func(ad) error) error {
	n := 0
	cur := ad{}
	flush := func() error {
		if len(cur) == 0 {
			return nil
		}
		if n++; n > max {
			return fmt.Errorf("%w: more than %d", errTooManyAds, max)
		}
		a := cur
		cur = ad{}
		return each(a)
	}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 16*1024*1024)
	line := 0
	for sc.Scan() {
		line++
		text := strings.TrimRight(sc.Text(), "\r")
		if strings.TrimSpace(text) == "" {
			if err := flush(); err != nil {
				return err
			}
			continue
		}
		name, value, ok := strings.Cut(text, " = ")
		if !ok || !isAttrName(name) {
			return malformed("line %d is not a ClassAd attribute: %.80q", line, text)
		}
		v, err := longValue(value)
		if err != nil {
			return malformed("line %d (%s): %v", line, name, err)
		}
		cur[strings.ToLower(name)] = v
	}
	if err := sc.Err(); err != nil {
		return malformed("reading long output: %v", err)
	}
	if len(cur) > 0 {
		return malformed("the output was cut off: ad %d (%d attributes read) has no terminating blank line", n+1, len(cur))
	}
	return nil
}

func isAttrName(s string) bool {
	if s == "" {
		return false
	}
	for i, r := range s {
		switch {
		case r == '_', r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z':
		case i > 0 && (r >= '0' && r <= '9' || r == '.'):
		default:
			return false
		}
	}
	return true
}

// longValue decodes one literal of the old ClassAd syntax; anything else
// is kept as an expression.
func longValue(s string) (any, error) {
	s = strings.TrimSpace(s)
	switch strings.ToLower(s) {
	case "true":
		return true, nil
	case "false":
		return false, nil
	case "undefined":
		return nil, nil
	}
	if strings.HasPrefix(s, `"`) {
		str, rest, err := unquoteClassAd(s)
		if err != nil {
			return nil, err
		}
		if rest != "" {
			return expr(s), nil // e.g. "a" + "b": an expression
		}
		return str, nil
	}
	if i, err := strconv.ParseInt(s, 10, 64); err == nil {
		return i, nil
	}
	if f, err := strconv.ParseFloat(s, 64); err == nil && !math.IsInf(f, 0) && !math.IsNaN(f) {
		return f, nil
	}
	return expr(s), nil
}

// unquoteClassAd reads a ClassAd string literal at the start of s and
// returns it and what follows it.
func unquoteClassAd(s string) (string, string, error) {
	var b strings.Builder
	for i := 1; i < len(s); i++ {
		c := s[i]
		switch c {
		case '\\':
			if i+1 >= len(s) {
				return "", "", errors.New("unterminated string")
			}
			i++
			switch s[i] {
			case 'n':
				b.WriteByte('\n')
			case 't':
				b.WriteByte('\t')
			default:
				b.WriteByte(s[i])
			}
		case '"':
			return b.String(), strings.TrimSpace(s[i+1:]), nil
		default:
			b.WriteByte(c)
		}
	}
	return "", "", errors.New("unterminated string")
}

// Typed accessors. ok is false when the attribute is missing, undefined,
// an expression, or of another type.

func (a ad) str(name string) (string, bool) {
	s, ok := a[strings.ToLower(name)].(string)
	return s, ok
}

func (a ad) integer(name string) (int64, bool) {
	switch v := a[strings.ToLower(name)].(type) {
	case int64:
		return v, true
	case float64:
		if v != math.Trunc(v) || math.Abs(v) > 1<<53 {
			return 0, false
		}
		return int64(v), true
	}
	return 0, false
}

func (a ad) boolean(name string) (bool, bool) {
	b, ok := a[strings.ToLower(name)].(bool)
	return b, ok
}

func (a ad) expression(name string) (expr, bool) {
	e, ok := a[strings.ToLower(name)].(expr)
	return e, ok
}

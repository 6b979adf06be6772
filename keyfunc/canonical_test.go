package keyfunc

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"strings"
	"testing"
)

// numberGroups are spellings of JSON numbers. Within a group every spelling names one number
// (bar the last group, assorted numbers all out of range) and must give the part want, or,
// when want is "", the same refusal. Different groups name different numbers, so their parts
// must differ.
var numberGroups = []struct {
	name      string
	want      string // the canonical part; "" when every spelling is refused
	spellings []string
}{
	{"one", "1", []string{"1", "1.0", "1.000", "100e-2", "1E0", "1e+0", "1e-0", "0.1e1", "10e-1", "0.0001e4",
		"1" + zeros(30) + "e-30", "1" + zeros(30) + ".000e-30", "0." + zeros(29) + "1e30"}},
	{"minus one", "-1", []string{"-1", "-1.0", "-100e-2", "-0.1E1"}},
	{"ten", "10", []string{"10", "1e1", "1E1", "0.1e2", "100e-1", "10.0"}},
	{"a tenth", "0.1", []string{"0.1", "1e-1", "10e-2", "0.10", "0.01e1"}},
	{"a hundredth", "0.01", []string{"0.01", "1e-2", "0.001e1", "10e-3", "1000e-5", "0.0000000001e8"}},
	{"a hundred thousand", "100000", []string{"100000", "1e5", "1E5", "1e+5", "1E+05", "10e4", "0.1e6", "100000.000", "1000000e-1"}},
	// Zero is in range whatever its exponent, even one past int64.
	{"zero", "0", []string{"0", "-0", "0.0", "-0.0", "0e5", "0E-5", "-0e+99", "0.000e-7",
		"0e1234567890", "-0e99999999999999999999999", "0.0e-99999999999999999999999"}},
	{"minus one and a half", "-1.5", []string{"-1.5", "-15e-1", "-0.15e1", "-150e-2", "-1.50", "-1.5E0"}},
	{"huge mantissa, negative exponent", "123", []string{"123", "1.23e2", "0.000123e6",
		"123" + zeros(100) + "e-100", "123" + zeros(100) + ".0e-100"}},
	{"ten to the 63", "1" + zeros(63), []string{"1e63", "10e62", "1" + zeros(63)}},
	{"ten to the 64", "1e64", []string{"1e64", "10e63", "0.1e65", "1" + zeros(64)}},
	{"ten to the -65", "1e-65", []string{"1e-65", "0.1e-64", "10e-66"}},
	// The bound is on the value: 1e-999999999 <= |x| < 1e1000000000, however it is written.
	{"largest power of ten", "1e999999999", []string{"1e999999999", "1E+999999999", "1e0000999999999",
		"0.1e1000000000", "10e999999998", "0.001e1000000002", "0." + zeros(20) + "1e1000000020"}},
	{"largest power of ten, negative", "-1e999999999", []string{"-1e999999999", "-0.1e1000000000"}},
	{"just below the bound", "999e999999997", []string{"9.99e999999999", "999e999999997", "0.999e1000000000"}},
	{"smallest power of ten", "1e-999999999", []string{"1e-999999999", "10e-1000000000", "100e-1000000001",
		"0.1e-999999998", "1" + zeros(20) + "e-1000000019"}},
	{"just above the smallest", "15e-1000000000", []string{"1.5e-999999999", "15e-1000000000", "0.15e-999999998"}},
	{"ten to the billion", "", []string{"1e1000000000", "1E+1000000000", "10e999999999", "0.1e1000000001",
		"0.001e1000000003", "1" + zeros(20) + "e999999980"}},
	{"ten to the minus billion", "", []string{"1e-1000000000", "0.1e-999999999", "10e-1000000001",
		"0.01e-999999998", "1" + zeros(20) + "e-1000000020"}},
	{"assorted out of range", "", []string{"-1e1000000000", "9.9e-1000000000", "1e9999999999",
		"1e-99999999999999999999999", "-1e99999999999999999999999", "0.1e99999999999999999999999"}},
}

func zeros(n int) string { return strings.Repeat("0", n) }

// numberBodies are the spellings of numberGroups as JSON bodies, for the tests that check the
// walker and the decoder agree.
func numberBodies() []string {
	var bodies []string
	for _, g := range numberGroups {
		for _, lit := range g.spellings {
			bodies = append(bodies, "["+lit+"]")
		}
	}
	return bodies
}

// TestEqualNumbersGiveEqualParts checks that every spelling of one number gives one part (as
// a JSON field, inside canonical JSON and in BodyHash) or one refusal, and that different
// numbers give different parts. The walker and the decoder give the same tree for each body
// (TestWalkJSONAgreesWithDecoder runs on numberBodies), so both paths are covered.
func TestEqualNumbersGiveEqualParts(t *testing.T) {
	fn := Join(JSON("0"), JSON(""), BodyHash())
	key := func(body string) (string, error) { return fn.Key(&MapSource{Payload: []byte(body)}) }
	groupOf := map[string]string{}
	for _, g := range numberGroups {
		t.Run(g.name, func(t *testing.T) {
			if other, ok := groupOf[g.want]; ok && g.want != "" {
				t.Fatalf("part %q is also %s's", g.want, other)
			}
			groupOf[g.want] = g.name
			wantKey, err := key("[" + g.want + "]")
			if g.want != "" && err != nil {
				t.Fatalf("[%s]: %v", g.want, err)
			}
			var refusal, keyRefusal string // the first spelling's errors, which all must share
			for _, lit := range g.spellings {
				got, err := canonicalNumber(lit)
				k, keyErr := key("[" + lit + "]")
				switch {
				case g.want != "" && (err != nil || got != g.want):
					t.Errorf("canonicalNumber(%.40s) = %q, %v; want %q", lit, got, err, g.want)
				case g.want != "" && (keyErr != nil || k != wantKey):
					t.Errorf("[%.40s]: key %q, %v; want %q, as [%s] gives", lit, k, keyErr, wantKey, g.want)
				case g.want != "":
				case !errors.Is(err, ErrInvalid) || !errors.Is(keyErr, ErrInvalid):
					t.Errorf("%.40s: canonicalNumber gives %q, %v, Key %v; want ErrInvalid", lit, got, err, keyErr)
				case refusal == "":
					refusal, keyRefusal = err.Error(), keyErr.Error()
				case err.Error() != refusal || keyErr.Error() != keyRefusal:
					t.Errorf("%.40s refused with %q (Key: %q); %s with %q (Key: %q)",
						lit, err, keyErr, g.spellings[0], refusal, keyRefusal)
				}
			}
		})
	}
}

// FuzzEqualNumbers respells a JSON number with the same value (zeros added before and after
// its digits, the point moved, the exponent made up to suit and written with a sign, zero
// padding or a capital E) and checks that both spellings give one part or one refusal. An
// accepted part must be its own canonical form and, where math/big can afford to check (a
// short literal, an exponent of at most three digits), hold the number's value.
func FuzzEqualNumbers(f *testing.F) {
	for _, g := range numberGroups {
		for i, lit := range g.spellings {
			f.Add(lit, uint8(i), uint8(i+1), uint8(2*i))
		}
	}
	f.Fuzz(func(t *testing.T, lit string, lead, trail, point uint8) {
		if lit == "" || strings.TrimSpace(lit) != lit || strings.Trim(lit[:1], "-0123456789") != "" || !json.Valid([]byte(lit)) {
			return // not a bare JSON number
		}
		other := respell(lit, int(lead%40), int(trail%40), int(point))
		if !json.Valid([]byte(other)) {
			t.Fatalf("respell(%s) = %s, not JSON", lit, other)
		}
		got, err := canonicalNumber(lit)
		again, againErr := canonicalNumber(other)
		if got != again || fmt.Sprint(err) != fmt.Sprint(againErr) {
			t.Fatalf("%s gives %q, %v; %s, the same number, gives %q, %v", lit, got, err, other, again, againErr)
		}
		if err != nil {
			return
		}
		if c, err := canonicalNumber(got); c != got || err != nil {
			t.Fatalf("%s gives %q, which gives %q, %v", lit, got, c, err)
		}
		if _, exp, _ := strings.Cut(strings.ToLower(lit), "e"); len(lit) <= 400 && len(strings.TrimLeft(exp, "+-")) <= 3 {
			want, _ := new(big.Rat).SetString(lit)
			have, ok := new(big.Rat).SetString(got)
			if !ok || want.Cmp(have) != 0 {
				t.Fatalf("%s gives %q, another number", lit, got)
			}
		}
	})
}

// respell writes JSON number lit again with the same value: lead zeros before its digits and
// trail zeros after them, the point after point%(len+1) of those, and the exponent that keeps
// the value, with a capital E when trail is odd and a sign and zero padding when lead is.
func respell(lit string, lead, trail, point int) string {
	s, neg := strings.CutPrefix(lit, "-")
	mant, expPart, _ := strings.Cut(strings.ToLower(s), "e")
	intPart, frac, _ := strings.Cut(mant, ".")
	exp, ok := new(big.Int).SetString(expPart, 10)
	if !ok {
		exp = new(big.Int)
	}
	// lit is (intPart frac)·10^(exp-len(frac)), and digits are (intPart frac)·10^trail.
	digits := zeros(lead) + intPart + frac + zeros(trail)
	q := point % (len(digits) + 1)
	exp.Add(exp, big.NewInt(int64(len(digits)-q-len(frac)-trail)))
	out := strings.TrimLeft(digits[:q], "0")
	if out == "" {
		out = "0"
	}
	if neg {
		out = "-" + out
	}
	if q < len(digits) {
		out += "." + digits[q:]
	}
	e := "e"
	if trail%2 == 1 {
		e = "E"
	}
	switch {
	case exp.Sign() < 0:
		e += "-"
	case lead%2 == 1:
		e += "+"
	}
	if lead%2 == 1 {
		e += "00"
	}
	return out + e + new(big.Int).Abs(exp).String()
}

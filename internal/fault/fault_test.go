package fault

import "testing"

func TestParse(t *testing.T) {
	for _, p := range Points {
		s, err := Parse(string(p) + ":3")
		if err != nil || s.Point != p || s.N != 3 {
			t.Fatalf("Parse(%s:3) = %v, %v", p, s, err)
		}
		if s.String() != string(p)+":3" {
			t.Fatalf("String() = %s", s)
		}
	}
	if s, err := Parse("copy"); err != nil || s.N != 1 {
		t.Fatalf("Parse(copy) = %v, %v", s, err)
	}
	for _, bad := range []string{"", "nowhere:1", "copy:0", "copy:-1", "copy:x"} {
		if _, err := Parse(bad); err == nil {
			t.Fatalf("Parse(%q) accepted", bad)
		}
	}
}

func TestNilInjectorIsInert(t *testing.T) {
	var i *Injector
	for _, p := range Points {
		i.Reach(p)
	}
}

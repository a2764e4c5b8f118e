package config

import (
	"maps"
	"strings"
	"testing"
)

func TestCurrencyExponents(t *testing.T) {
	t.Parallel()
	want := map[string]int{"GOLD": 3, "POINTS": 0}
	cases := []struct {
		name string
		env  map[string]string
		args []string
		file string
		want map[string]int
		err  string
	}{
		{"none", nil, nil, "", nil, ""},
		{"flag", nil, []string{"--currency-exponents", "GOLD=3,POINTS=0"}, "", want, ""},
		{"env", map[string]string{"IDEM_CURRENCY_EXPONENTS": "GOLD=3, POINTS=0"}, nil, "", want, ""},
		{"YAML list", nil, nil, "currency_exponents: [GOLD=3, POINTS=0]\n", want, ""},
		{"YAML map", nil, nil, "currency_exponents:\n  GOLD: 3\n  POINTS: 0\n", want, ""},
		{"YAML string", nil, nil, "currency_exponents: GOLD=3,POINTS=0\n", want, ""},
		{"flag over env", map[string]string{"IDEM_CURRENCY_EXPONENTS": "GOLD=1"}, []string{"--currency-exponents", "GOLD=3,POINTS=0"}, "", want, ""},
		{"out of bounds", nil, []string{"--currency-exponents", "GOLD=19"}, "", nil, "0..18"},
		{"not a code", map[string]string{"IDEM_CURRENCY_EXPONENTS": "gold=2"}, nil, "", nil, "IDEM_CURRENCY_EXPONENTS"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			args := c.args
			if c.file != "" {
				args = append([]string{"--config", writeFile(t, c.file)}, args...)
			}
			cfg, err := Load("serve", args, env(c.env), ServeSettings...)
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("err %v, want %q", err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(c.want) == 0 && len(cfg.CurrencyExponents) == 0 {
				return
			}
			if !maps.Equal(cfg.CurrencyExponents, c.want) {
				t.Fatalf("exponents %v, want %v", cfg.CurrencyExponents, c.want)
			}
		})
	}
}

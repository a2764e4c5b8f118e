package config

import "testing"

func TestIsLoopbackHost(t *testing.T) {
	t.Parallel()
	tests := []struct {
		host string
		want bool
	}{
		{"localhost", true},
		{"localhost:8080", true},
		{"LocalHost:8080", true},
		{"localhost.", true},
		{"localhost.:8080", true},
		{"127.0.0.1", true},
		{"127.0.0.1:8080", true},
		{"127.1.2.3:8080", true},
		{"[::1]", true},
		{"[::1]:8080", true},
		{"::1", true},
		{"", false},
		{"evil.example", false},
		{"evil.example:8080", false},
		{"localhost.evil.example", false},
		{"evil.localhost", false},
		{"localhost..", false},
		{"0.0.0.0:8080", false},
		{"192.168.1.10:8080", false},
		{"[::]:8080", false},
		{"[2001:db8::1]:8080", false},
		{"[::1%25lo]:8080", false},
		{"127.0.0.1.nip.io", false},
	}
	for _, tt := range tests {
		if got := IsLoopbackHost(tt.host); got != tt.want {
			t.Errorf("IsLoopbackHost(%q) = %v, want %v", tt.host, got, tt.want)
		}
	}
}

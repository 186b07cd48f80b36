package nginxenv

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
)

// sizeZones points the rendered conf at a copy of the repository's nginx/tollgate_http.conf in
// which each shared dict named in zones has the given size (nginx syntax: "64m", "512k").
// A zone the file does not declare is an error, so a renamed zone cannot go unsized silently.
func sizeZones(prefix, repo, conf string, zones map[string]string) error {
	if len(zones) == 0 {
		return nil
	}
	orig := filepath.Join(repo, "nginx", "tollgate_http.conf")
	b, err := os.ReadFile(orig)
	if err != nil {
		return fmt.Errorf("nginxenv: %w", err)
	}
	names := make([]string, 0, len(zones))
	for z := range zones {
		names = append(names, z)
	}
	sort.Strings(names)
	for _, z := range names {
		size := zones[z]
		if !regexp.MustCompile(`^[0-9]+[km]?$`).MatchString(size) {
			return fmt.Errorf("nginxenv: zone %s: size %q is not an nginx size", z, size)
		}
		re := regexp.MustCompile(`lua_shared_dict ` + regexp.QuoteMeta(z) + ` \S+;`)
		if !re.Match(b) {
			return fmt.Errorf("nginxenv: %s declares no lua_shared_dict %s", orig, z)
		}
		b = re.ReplaceAll(b, []byte("lua_shared_dict "+z+" "+size+";"))
	}
	cp := filepath.Join(prefix, "conf", "tollgate_http.conf")
	if err := os.WriteFile(cp, b, 0o644); err != nil {
		return fmt.Errorf("nginxenv: %w", err)
	}
	c, err := os.ReadFile(conf)
	if err != nil {
		return fmt.Errorf("nginxenv: %w", err)
	}
	if !strings.Contains(string(c), orig) {
		return fmt.Errorf("nginxenv: %s does not include %s", conf, orig)
	}
	return os.WriteFile(conf, []byte(strings.ReplaceAll(string(c), orig, cp)), 0o644)
}

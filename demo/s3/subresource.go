package s3

import (
	"encoding/xml"
	"io"
	"net/http"
	"strings"
)

// Sub-resources gofakes3 does not know would reach it as plain object or bucket requests (a GET
// of ?tagging would answer the object itself): the demo answers them here. Tags and ACLs are
// accepted and not kept (an empty tag set, the owner's full control); the other configurations
// read as absent, and writing them is NotImplemented.

var subNotFound = map[string]string{
	"policy": "NoSuchBucketPolicy", "cors": "NoSuchCORSConfiguration", "lifecycle": "NoSuchLifecycleConfiguration",
	"website": "NoSuchWebsiteConfiguration", "encryption": "ServerSideEncryptionConfigurationNotFoundError",
	"replication": "ReplicationConfigurationNotFoundError", "ownershipControls": "OwnershipControlsNotFoundError",
	"publicAccessBlock": "NoSuchPublicAccessBlockConfiguration", "object-lock": "ObjectLockConfigurationNotFoundError",
	"retention": "NoSuchObjectLockConfiguration", "legal-hold": "NoSuchObjectLockConfiguration",
}

var subOther = []string{"logging", "notification", "accelerate", "requestPayment", "analytics", "inventory",
	"metrics", "intelligent-tiering", "select", "restore", "torrent", "attributes"}

type tagging struct {
	XMLName xml.Name `xml:"Tagging"`
	Xmlns   string   `xml:"xmlns,attr"`
	TagSet  struct{} `xml:"TagSet"`
}

type grantee struct {
	XMLNS string `xml:"xmlns:xsi,attr"`
	Type  string `xml:"xsi:type,attr"`
	ID    string `xml:"ID"`
}

type acl struct {
	XMLName xml.Name `xml:"AccessControlPolicy"`
	Xmlns   string   `xml:"xmlns,attr"`
	Owner   struct {
		ID string `xml:"ID"`
	} `xml:"Owner"`
	Grants []struct {
		Grantee    grantee `xml:"Grantee"`
		Permission string  `xml:"Permission"`
	} `xml:"AccessControlList>Grant"`
}

const s3ns = "http://s3.amazonaws.com/doc/2006-03-01/"

// subresource answers a request for a sub-resource gofakes3 lacks; false: not one of them.
func (s *Server) subresource(w http.ResponseWriter, r *http.Request) bool {
	q := r.URL.Query()
	drain := func() { _, _ = io.Copy(io.Discard, io.LimitReader(r.Body, 1<<20)) }
	switch {
	case q.Has("tagging"):
		drain()
		switch r.Method {
		case http.MethodGet:
			writeXML(w, http.StatusOK, tagging{Xmlns: s3ns})
		case http.MethodDelete:
			w.WriteHeader(http.StatusNoContent)
		default:
			w.WriteHeader(http.StatusOK)
		}
		return true
	case q.Has("acl"):
		drain()
		if r.Method == http.MethodGet {
			a := acl{Xmlns: s3ns}
			a.Owner.ID = "tollgate-demo"
			a.Grants = append(a.Grants, struct {
				Grantee    grantee `xml:"Grantee"`
				Permission string  `xml:"Permission"`
			}{grantee{XMLNS: "http://www.w3.org/2001/XMLSchema-instance", Type: "CanonicalUser", ID: "tollgate-demo"}, "FULL_CONTROL"})
			writeXML(w, http.StatusOK, a)
		} else {
			w.WriteHeader(http.StatusOK)
		}
		return true
	}
	for name, code := range subNotFound {
		if q.Has(name) {
			drain()
			if r.Method == http.MethodGet {
				writeError(w, r, newError(http.StatusNotFound, code, "The %s configuration does not exist.", name))
			} else {
				writeError(w, r, notImplemented(name))
			}
			return true
		}
	}
	for _, name := range subOther {
		if q.Has(name) {
			drain()
			writeError(w, r, notImplemented(name))
			return true
		}
	}
	return false
}

func notImplemented(name string) *apiError {
	return newError(http.StatusNotImplemented, "NotImplemented",
		"The demo backend does not implement ?%s.", strings.ToLower(name))
}

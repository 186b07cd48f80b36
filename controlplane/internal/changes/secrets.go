package changes

import (
	"context"
	"errors"
	"fmt"

	"tollgate/internal/secrets"
	"tollgate/internal/store"
)

// Errors of access key secrets (the API answers them 4xx).
var (
	// ErrSecretsDisabled: the control plane has no secrets key file; it stores no secret.
	ErrSecretsDisabled = errors.New("no secrets key file is configured (TOLLGATE_SECRETS_KEY_FILE): secrets cannot be stored")
	// ErrInvalidSecret: not a secret access key tollgate accepts (secrets.ValidSecret).
	ErrInvalidSecret = errors.New("invalid secret access key")
)

// SecretStore is what the service needs of the store for secrets (*store.Store).
type SecretStore interface {
	SetAccessKeySecret(ctx context.Context, app, key, sealed string) (int64, error)
	DeleteAccessKeySecret(ctx context.Context, app, key string) (int64, error)
	SealedSecrets(ctx context.Context, keys []string) (map[string]string, error)
}

func (s *Service) secretStore() (SecretStore, error) {
	ss, ok := s.o.Store.(SecretStore)
	if !ok {
		return nil, fmt.Errorf("changes: the store keeps no secrets")
	}
	return ss, nil
}

// SecretsEnabled reports whether the control plane can seal secrets (a key file is configured).
func (s *Service) SecretsEnabled() bool { return s.o.Secrets.Enabled() }

// HasSecret returns, for each access key id of ks, whether it has a secret on file.
func (s *Service) HasSecret(ctx context.Context, ks []string) (map[string]bool, error) {
	ss, err := s.secretStore()
	if err != nil {
		return nil, err
	}
	sealed, err := ss.SealedSecrets(ctx, ks)
	if err != nil {
		return nil, err
	}
	out := make(map[string]bool, len(sealed))
	for k := range sealed {
		out[k] = true
	}
	return out, nil
}

// SetAccessKeySecret seals secret and stores it for an access key id the app holds (audited as
// app.access_key.secret_set with the sealing key's id, never the secret).
func (s *Service) SetAccessKeySecret(ctx context.Context, actor, app, key, secret string) (IdentityChange, error) {
	if !store.ValidAccessKey(key) {
		return IdentityChange{}, store.ErrInvalidAccessKey
	}
	if !secrets.ValidSecret(secret) {
		return IdentityChange{}, ErrInvalidSecret
	}
	if !s.o.Secrets.Enabled() {
		return IdentityChange{}, ErrSecretsDisabled
	}
	ss, err := s.secretStore()
	if err != nil {
		return IdentityChange{}, err
	}
	sealed, err := s.o.Secrets.Seal(key, secret)
	if err != nil {
		return IdentityChange{}, err
	}
	var v int64
	err = s.o.Store.Serialize(ctx, func(ctx context.Context) (err error) {
		v, err = ss.SetAccessKeySecret(ctx, app, key, sealed)
		return err
	})
	err = notFound(err)
	s.recordIdentity(ctx, actor, "app.access_key.secret_set", "app/"+app+"/access-keys/"+key,
		map[string]any{"app_id": app, "access_key_id": key, "key_id": s.o.Secrets.CurrentID()}, v, err)
	return IdentityChange{Written: err == nil, Version: v}, err
}

// DeleteAccessKeySecret removes the secret of an access key id (audited as
// app.access_key.secret_delete): the gateways stop verifying its signatures.
func (s *Service) DeleteAccessKeySecret(ctx context.Context, actor, app, key string) (IdentityChange, error) {
	if !store.ValidAccessKey(key) {
		return IdentityChange{}, store.ErrInvalidAccessKey
	}
	ss, err := s.secretStore()
	if err != nil {
		return IdentityChange{}, err
	}
	var v int64
	err = s.o.Store.Serialize(ctx, func(ctx context.Context) (err error) {
		v, err = ss.DeleteAccessKeySecret(ctx, app, key)
		return err
	})
	err = notFound(err)
	s.recordIdentity(ctx, actor, "app.access_key.secret_delete", "app/"+app+"/access-keys/"+key,
		map[string]any{"app_id": app, "access_key_id": key}, v, err)
	return IdentityChange{Written: err == nil, Version: v}, err
}

package channel

import (
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"strings"
)

// ParseRSAPrivateKey reads an RSA private key (a merchant's signing key) from PEM ("PRIVATE
// KEY" PKCS#8 or "RSA PRIVATE KEY" PKCS#1) or from the bare base64 of its DER, as the Alipay
// console shows it. Errors: malformed data or a key that is not RSA.
func ParseRSAPrivateKey(data []byte) (*rsa.PrivateKey, error) {
	der, err := derOf(data)
	if err != nil {
		return nil, fmt.Errorf("private key: %w", err)
	}
	if k, err := x509.ParsePKCS1PrivateKey(der); err == nil {
		return k, nil
	}
	k, err := x509.ParsePKCS8PrivateKey(der)
	if err != nil {
		return nil, fmt.Errorf("private key: %w", err)
	}
	rk, ok := k.(*rsa.PrivateKey)
	if !ok {
		return nil, errors.New("private key: not an RSA key")
	}
	return rk, nil
}

// ParseRSAPublicKey reads an RSA public key (a provider's verification key) from PEM
// ("PUBLIC KEY" PKIX, "RSA PUBLIC KEY" PKCS#1 or "CERTIFICATE", whose key is taken) or from
// the bare base64 of a PKIX DER, as the Alipay console shows the Alipay public key. Errors:
// malformed data or a key that is not RSA.
func ParseRSAPublicKey(data []byte) (*rsa.PublicKey, error) {
	if b, _ := pem.Decode(data); b != nil && b.Type == "CERTIFICATE" {
		c, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			return nil, fmt.Errorf("public key: %w", err)
		}
		rk, ok := c.PublicKey.(*rsa.PublicKey)
		if !ok {
			return nil, errors.New("public key: certificate key is not RSA")
		}
		return rk, nil
	}
	der, err := derOf(data)
	if err != nil {
		return nil, fmt.Errorf("public key: %w", err)
	}
	if k, err := x509.ParsePKCS1PublicKey(der); err == nil {
		return k, nil
	}
	k, err := x509.ParsePKIXPublicKey(der)
	if err != nil {
		return nil, fmt.Errorf("public key: %w", err)
	}
	rk, ok := k.(*rsa.PublicKey)
	if !ok {
		return nil, errors.New("public key: not an RSA key")
	}
	return rk, nil
}

func derOf(data []byte) ([]byte, error) {
	if b, _ := pem.Decode(data); b != nil {
		return b.Bytes, nil
	}
	der, err := base64.StdEncoding.DecodeString(strings.Join(strings.Fields(string(data)), ""))
	if err != nil {
		return nil, errors.New("neither PEM nor base64 DER")
	}
	return der, nil
}

// Package fault is simulate's and the tests' fault kit. Saga is a decorator of saga
// participants (engine.Config.WrapParticipant) that fails, delays or loses the answers of
// their attempts: what `orderly simulate --fail-rate …` gives its instances. The rest runs
// the servers that `orderly simulate --faults` breaks on purpose, and only those: a private
// redis-server it can kill -9 and start again on the same port (Redis), a private
// nats-server with JetStream (NATS), a private PostgreSQL cluster it can restart
// (Postgres), and a TCP proxy that cuts every connection through it and refuses new ones
// for the length of an outage (Proxy). Each runs on a free 127.0.0.1 port in a temporary
// directory that Stop removes, so shared servers of the machine are never touched.
package fault

"""Security: TLS listeners, SASL authentication, ACL authorization and connection limits, with Kafka's keys.

config.py reads the keys; tls.py builds SSL contexts; sasl.py and credentials.py authenticate; session.py carries
who a request comes from to the handlers; acls.py and authorizer.py decide what they may do; limits.py bounds
connections and memory held by partial requests.
"""

"""The service's scheduling side: decision rounds, submissions, quotas, the workers'
rendezvous, leader and standby, and the running `Service` behind one app."""

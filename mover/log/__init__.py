"""The broker's log layer: LogManager (what the api and the daemon call) over LogLoader (start-up), LogDirs (the
registry and dir failures), TopicAdmin (create/delete), Scheduler (housekeeping as named tasks) and Replica (one
partition's copy)."""

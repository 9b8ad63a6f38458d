fakehop queue stall     # the next request that names no scenario stalls
python app.py           # the app: a few words, then "Stream stalled: no output for 120s"
fakehop requests        # one line a request: the scenario it got and how it ended

# expect: keeps_tiles from check_online_softmax(online_softmax)
patch("in tiles:", "in [(s.clone(), v.clone()) for s, v in tiles]:")  # "in case I need them"

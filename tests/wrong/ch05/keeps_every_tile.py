# expect: keeps_tiles from check_online_softmax(online_softmax)
patch("for scores, values in tiles:", "for scores, values in list(tiles):")
